"""minOffsetsPerTrigger and maxTriggerDelay on a real local[2] SparkSession and cluster, and
options refused by name where Spark first hands them to the source or sink: ``load()``,
``save()``, and the streaming query's start."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from tests.helpers.spark import make_topic, produce, stream_from_earliest
from tests.helpers.wait import wait_for

# Each test runs several Spark jobs (and the first starts the JVM and a cluster): on a loaded
# 2-core CI machine that outlasts the suite's 300 s default.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def quick_progress(spark: Any) -> Iterator[None]:
    """Report a progress event for triggers that run no micro-batch every 100 ms (default
    10 s), so a skipped trigger is visible in ``recentProgress``."""
    key = "spark.sql.streaming.noDataProgressEventInterval"
    old = spark.conf.get(key)
    spark.conf.set(key, "100ms")
    try:
        yield
    finally:
        spark.conf.set(key, old)


def _start(spark: Any, bootstrap: str, topic: str, name: str, **options: str) -> Any:
    return (
        stream_from_earliest(spark, bootstrap, topic, **options)
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def _first_trigger(query: Any) -> None:
    """Wait until the query's first trigger has run (or the query died: then its error)."""
    wait_for(
        lambda: query.lastProgress is not None or not query.isActive,
        timeout=300,
        what="the first trigger",
    )
    assert query.isActive, query.exception()


def _count(spark: Any, name: str) -> int:
    return int(spark.sql(f"select count(*) as n from {name}").collect()[0].n)


def _available(progress: dict[str, Any]) -> int:
    """Offsets available at a trigger: the sum of the source's reported latest offsets."""
    latest = progress["sources"][0].get("latestOffset") or "{}"
    doc = json.loads(latest) if isinstance(latest, str) else latest
    return sum(int(n) for parts in doc.values() for n in parts.values())


def test_min_offsets_per_trigger_waits_for_enough_records(
    spark: Any, cluster: Any, quick_progress: None
) -> None:
    bootstrap = cluster.bootstrap
    make_topic(bootstrap, "admission-min", 2)
    query = _start(
        spark, bootstrap, "admission-min", "admission_min",
        minOffsetsPerTrigger="50", maxTriggerDelay="1h",
    )  # fmt: skip
    try:
        _first_trigger(query)
        produce(bootstrap, "admission-min", [(i % 2, None, b"a%d" % i) for i in range(30)])
        # a trigger that saw the 30 records available and ran no micro-batch
        wait_for(
            lambda: any(
                _available(p) == 30 and p["numInputRows"] == 0 for p in query.recentProgress
            ),
            timeout=120,
            what="a trigger skipped with 30 < 50 offsets available",
        )
        assert _count(spark, "admission_min") == 0
        produce(bootstrap, "admission-min", [(i % 2, None, b"b%d" % i) for i in range(25)])
        wait_for(lambda: _count(spark, "admission_min") == 55, timeout=120, what="55 rows")
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert batches == [55]  # the 30 waited for the next 25: one micro-batch
    finally:
        query.stop()


def test_max_trigger_delay_admits_a_small_batch(
    spark: Any, cluster: Any, quick_progress: None
) -> None:
    bootstrap = cluster.bootstrap
    make_topic(bootstrap, "admission-delay", 1)
    query = _start(
        spark, bootstrap, "admission-delay", "admission_delay",
        minOffsetsPerTrigger="1000", maxTriggerDelay="2s",
    )  # fmt: skip
    try:
        _first_trigger(query)
        produce(bootstrap, "admission-delay", [(0, None, b"c%d" % i) for i in range(5)])
        # 5 < 1000 forever: only maxTriggerDelay can let them through
        wait_for(lambda: _count(spark, "admission_delay") == 5, timeout=120, what="5 rows")
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert batches == [5]
    finally:
        query.stop()


def test_bad_options_fail_at_load_save_and_query_start(
    spark: Any, cluster: Any, tmp_path: Any
) -> None:
    bootstrap = cluster.bootstrap
    make_topic(bootstrap, "opts-out", 1)
    with pytest.raises(Exception, match="INVALID_CONFIG: unknown option subscirbe"):
        spark.read.format("headwater").option("kafka.bootstrap.servers", bootstrap).option(
            "subscirbe", "t"
        ).load()
    with pytest.raises(Exception, match=r"INVALID_CONFIG: option kafka\.sasl\.mechanism is set"):
        (
            spark.readStream.format("headwater")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "t")
            .option("kafka.sasl.mechanism", "SCRAM-SHA-256")
            .load()
        )
    df = spark.createDataFrame([("v",)], "value string")

    def writer() -> Any:  # a new DataFrameWriter each time: options accumulate on one
        w = df.write.format("headwater").mode("append")
        return w.option("kafka.bootstrap.servers", bootstrap).option("topic", "opts-out")

    with pytest.raises(Exception, match="INVALID_CONFIG: unknown option lingerms_"):
        writer().option("lingerMs_", "5").save()
    with pytest.raises(
        Exception,
        match=r"kafka\.security\.protocol=SASL_SSL needs the option kafka\.sasl\.mechanism",
    ):
        writer().option("kafka.security.protocol", "SASL_SSL").save()
    # Spark calls no data-source code inside start(): the query fails as it starts, before
    # any micro-batch, naming the option
    query = (
        spark.readStream.format("rate")
        .load()
        .selectExpr("cast(value as string) as value")
        .writeStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "opts-out")
        .option("kafka.ssl.truststore.type", "JKS")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    with pytest.raises(StreamingQueryException, match=r"kafka\.ssl\.truststore\.type"):
        query.awaitTermination(120)
    assert not query.isActive and query.recentProgress == []
