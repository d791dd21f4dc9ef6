"""spark.read.format("headwater"): a real local[2] SparkSession against a real LocalCluster."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.helpers.spark import make_topic, produce


def _read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("headwater").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


@pytest.fixture(scope="module")
def events(cluster: Any) -> dict[str, Any]:
    """Topic "events": 3 partitions, 40 records each; partition p record i has key b"k{p}-{i}"."""
    make_topic(cluster.bootstrap, "events", 3)
    records = [
        (p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode() * 3) for p in range(3) for i in range(40)
    ]
    metas = produce(cluster.bootstrap, "events", records, headers=[("h", b"x")])
    return {"records": records, "metas": metas}


def test_batch_read_returns_every_record_with_metadata(
    spark: Any, cluster: Any, events: Any
) -> None:
    df = _read(spark, cluster.bootstrap, subscribe="events", includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    rows = df.collect()
    # three partitions of 40 records: one task reads them all (minRecordsPerTask's default)
    assert df.rdd.getNumPartitions() == 1
    got = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows)
    want = sorted(
        (m.partition, m.offset, k, v)
        for (p, k, v), m in zip(events["records"], events["metas"], strict=True)
    )
    assert got == want and len(got) == 120
    by_offset = {(m.partition, m.offset): m for m in events["metas"]}
    for r in rows:
        m = by_offset[(r.partition, r.offset)]
        assert r.topic == "events" and r.timestampType == 0
        assert int(r.timestamp.timestamp() * 1000) == m.timestamp
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("h", b"x")]


def test_offsets_json_assign_and_split(spark: Any, cluster: Any, events: Any) -> None:
    start = json.dumps({"events": {"0": 5, "1": -2}})
    end = json.dumps({"events": {"0": 15, "1": -1}})
    df = _read(
        spark,
        cluster.bootstrap,
        assign=json.dumps({"events": [0, 1]}),
        startingOffsets=start,
        endingOffsets=end,
        maxRecordsPerPartition="4",
    )
    rows = df.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        [(0, o) for o in range(5, 15)] + [(1, o) for o in range(40)]
    )
    # 10 offsets of partition 0 and 40 of partition 1, at most 4 per Spark partition
    assert df.rdd.getNumPartitions() == 3 + 10


def test_starting_and_ending_timestamps(spark: Any, cluster: Any) -> None:
    make_topic(cluster.bootstrap, "timed", 2)
    base = int(time.time() * 1000) - 100_000
    for i in range(4):  # records at base, base+1000, base+2000, base+3000 in both partitions
        produce(
            cluster.bootstrap,
            "timed",
            [(0, None, b"a%d" % i), (1, None, b"b%d" % i)],
            timestamp=base + 1000 * i,
        )
    df = _read(
        spark,
        cluster.bootstrap,
        subscribePattern="tim.*",
        startingTimestamp=str(base + 1000),
        endingOffsetsByTimestamp=json.dumps({"timed": {"0": base + 3000, "1": base + 2500}}),
    )
    got = sorted((r.partition, bytes(r.value)) for r in df.collect())
    assert got == [(0, b"a1"), (0, b"a2"), (1, b"b1"), (1, b"b2")]


def test_bad_options_raise_typed_errors(spark: Any, cluster: Any, events: Any) -> None:
    with pytest.raises(Exception, match=r"INVALID_CONFIG.*exactly one of"):
        _read(spark, cluster.bootstrap, subscribe="events", assign='{"events": [0]}').collect()
    with pytest.raises(Exception, match=r"INVALID_CONFIG.*startingOffsets latest"):
        _read(spark, cluster.bootstrap, subscribe="events", startingOffsets="latest").collect()
    with pytest.raises(Exception, match=r"INVALID_CONFIG.*every partition"):
        _read(
            spark, cluster.bootstrap, subscribe="events", startingOffsets='{"events": {"0": 1}}'
        ).collect()


def test_batch_read_of_an_empty_topic_is_empty(spark: Any, cluster: Any) -> None:
    """No range to read: PySpark plans a placeholder partition, which reads nothing."""
    make_topic(cluster.bootstrap, "empty-topic", 2)
    df = _read(spark, cluster.bootstrap, subscribe="empty-topic")
    assert df.collect() == []
