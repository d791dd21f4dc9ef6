"""Fewer, larger tasks for small ranges (``minRecordsPerTask``) with a real SparkSession, and
the stream reader's partition lookups (one per trigger; new partitions still join)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from headwater_spark.stream import HeadwaterStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable

from headwater.client import AdminClient
from tests.helpers.spark import make_topic, produce, stream_from_earliest
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.timeout(1200)

PARTITIONS = 12
PER_PARTITION = 30


@pytest.fixture(scope="module")
def small(cluster: Any) -> list[tuple[int, int, bytes]]:
    """Topic "small": 12 partitions of 30 records; the (partition, offset, value) expected."""
    make_topic(cluster.bootstrap, "small", PARTITIONS)
    n = PARTITIONS * PER_PARTITION
    produce(cluster.bootstrap, "small", [(i % PARTITIONS, None, b"v%d" % i) for i in range(n)])
    return sorted((i % PARTITIONS, i // PARTITIONS, b"v%d" % i) for i in range(n))


def _batch(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "small")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


@pytest.mark.parametrize(
    ("options", "tasks"),
    [
        ({"minRecordsPerTask": "0"}, PARTITIONS),  # one task per topic partition
        ({"minRecordsPerTask": "90"}, 4),  # 3 ranges of 30 per task
        ({}, 1),  # the default (50,000): all 360 records in one task
        ({"minPartitions": "6"}, PARTITIONS),  # grouping never goes below minPartitions
    ],
)
def test_batch_read_groups_small_partitions_into_fewer_tasks(
    spark: Any, cluster: Any, small: list[Any], options: dict[str, str], tasks: int
) -> None:
    df = _batch(spark, cluster.bootstrap, **options)
    assert df.rdd.getNumPartitions() == tasks
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in df.collect())
    assert got == small  # every record exactly once


def _stream_tasks(
    spark: Any, bootstrap: str, checkpoint: Path, **options: str
) -> tuple[list[int], list[tuple[int, int, bytes]]]:
    """Run an AvailableNow query over "small" with 120 offsets per micro-batch (10 per
    partition): (tasks of each micro-batch, every row read)."""
    tasks: list[int] = []
    rows: list[tuple[int, int, bytes]] = []

    def each(batch: Any, _batch_id: int) -> None:
        if batch.isEmpty():
            return
        tasks.append(batch.rdd.getNumPartitions())
        rows.extend((r.partition, r.offset, bytes(r.value)) for r in batch.collect())

    df = stream_from_earliest(spark, bootstrap, "small", maxOffsetsPerTrigger="120", **options)
    query = (
        df.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(600), "the AvailableNow query did not finish in 600 s"
        assert query.exception() is None
    finally:
        query.stop()
    return tasks, rows


def test_micro_batches_of_small_ranges_run_fewer_tasks_and_read_each_record_once(
    spark: Any, cluster: Any, small: list[Any], tmp_path: Path
) -> None:
    per_range, rows = _stream_tasks(
        spark, cluster.bootstrap, tmp_path / "one", minRecordsPerTask="0"
    )
    assert per_range == [PARTITIONS] * 3 and sorted(rows) == small
    grouped, rows = _stream_tasks(
        spark, cluster.bootstrap, tmp_path / "grouped", minRecordsPerTask="40"
    )
    assert grouped == [3] * 3  # 12 ranges of 10 offsets: 4 per task
    assert len(rows) == len(small) and sorted(rows) == small  # no record twice, none lost


def test_stream_reader_looks_partitions_up_once_per_trigger_and_sees_new_ones(
    cluster: Any,
) -> None:
    """initialOffset, prepareForTriggerAvailableNow, the first latestOffset and partitions
    share one partition lookup; each later latestOffset looks them up again, so a
    partition added to the topic joins the stream at the next trigger."""
    bootstrap = cluster.bootstrap
    make_topic(bootstrap, "growing", 2)
    produce(bootstrap, "growing", [(p, None, b"x") for p in range(2) for _ in range(5)])
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": "growing"}
    reader = HeadwaterStreamReader({**options, "startingOffsets": "earliest"})
    lookups = 0
    admin = reader.resolver.admin
    list_topics = admin.list_topics

    def counted() -> Any:
        nonlocal lookups
        lookups += 1
        return list_topics()

    admin.list_topics = counted
    try:
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        reader._target = None  # go on as a continuous query from here
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {"growing": {"0": 5, "1": 5}}
        assert len(reader.partitions(start, end)) == 1  # two ranges of 5: one task
        reader.reportLatestOffset()
        assert lookups == 1
        with AdminClient(bootstrap) as a:
            a.create_partitions("growing", 3)
            wait_for(
                lambda: len(a.describe_topics(["growing"])[0].partitions) == 3,
                timeout=30,
                what="a third partition",
            )
        produce(bootstrap, "growing", [(2, None, b"y")] * 4)
        later = reader.latestOffset(end, ReadAllAvailable())
        assert lookups == 2
        assert later == {"growing": {"0": 5, "1": 5, "2": 4}}
        [task] = reader.partitions(end, later)
        assert [(r.partition, r.start, r.end) for r in task.ranges] == [(2, 0, 4)]
    finally:
        reader.stop()
