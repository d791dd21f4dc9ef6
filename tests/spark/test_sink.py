"""df.write / df.writeStream .format("headwater"): what is written reads back identical."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from tests.helpers.spark import make_topic, produce

HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("partition", IntegerType()),
        StructField("headers", HEADERS),
    ]
)


def _read_all(spark: Any, bootstrap: str, topic: str) -> list[Any]:
    return (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
        .collect()
    )


def _norm(r: Any) -> tuple[Any, ...]:
    headers = tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers or ())
    key = None if r.key is None else bytes(r.key)
    value = None if r.value is None else bytes(r.value)
    return (key, value, r.partition, headers)


def test_dataframe_written_to_a_topic_reads_back_identical(spark: Any, cluster: Any) -> None:
    make_topic(cluster.bootstrap, "sunk", 3)
    rows = [
        (
            None if i % 7 == 0 else b"k%d" % i,
            None if i % 11 == 0 else b"value-%d" % i * (1 + i % 5),
            i % 3,
            [("trace", b"t%d" % i), ("n", None)] if i % 2 else [],
        )
        for i in range(300)
    ]
    df = spark.createDataFrame(rows, SCHEMA).repartition(4)
    df.write.format("headwater").option("kafka.bootstrap.servers", cluster.bootstrap).option(
        "topic", "sunk"
    ).mode("append").save()
    got = sorted(map(_norm, _read_all(spark, cluster.bootstrap, "sunk")), key=repr)
    want = sorted(((k, v, p, tuple(h)) for k, v, p, h in rows), key=repr)
    assert got == want


def test_string_columns_and_topic_column_route_rows(spark: Any, cluster: Any) -> None:
    make_topic(cluster.bootstrap, "route-a", 2)
    make_topic(cluster.bootstrap, "route-b", 2)
    df = spark.createDataFrame(
        [(f"user{i}", f"click {i}", "route-a" if i % 3 else None) for i in range(60)],
        "key string, value string, topic string",
    )
    df.write.format("headwater").option("kafka.bootstrap.servers", cluster.bootstrap).option(
        "topic", "route-b"
    ).mode("append").save()
    a = _read_all(spark, cluster.bootstrap, "route-a")
    b = _read_all(spark, cluster.bootstrap, "route-b")
    assert sorted(bytes(r.value).decode() for r in a) == sorted(
        f"click {i}" for i in range(60) if i % 3
    )
    assert sorted(bytes(r.key).decode() for r in b) == sorted(f"user{i}" for i in range(0, 60, 3))
    # equal keys land in the same partition (the producer's key hash)
    parts = {bytes(r.key): r.partition for r in a}
    assert len(parts) == 40


def test_bad_sink_schema_is_rejected_before_writing(spark: Any, cluster: Any) -> None:
    df = spark.createDataFrame([(1, b"x")], "id int, payload binary")
    with pytest.raises(Exception, match="needs a value column"):
        df.write.format("headwater").option("kafka.bootstrap.servers", cluster.bootstrap).option(
            "topic", "sunk"
        ).mode("append").save()
    df2 = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="no topic"):
        df2.write.format("headwater").option("kafka.bootstrap.servers", cluster.bootstrap).mode(
            "append"
        ).save()


def test_overwrite_save_mode_is_refused_and_writes_nothing(spark: Any, cluster: Any) -> None:
    make_topic(cluster.bootstrap, "not-overwritten", 1)
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="save mode Overwrite is not allowed"):
        df.write.format("headwater").option("kafka.bootstrap.servers", cluster.bootstrap).option(
            "topic", "not-overwritten"
        ).mode("overwrite").save()
    assert _read_all(spark, cluster.bootstrap, "not-overwritten") == []


def test_streaming_sink_copies_a_topic(spark: Any, cluster: Any, tmp_path: Path) -> None:
    make_topic(cluster.bootstrap, "copy-in", 2)
    make_topic(cluster.bootstrap, "copy-out", 2)
    src = [(i % 2, b"k%d" % i, b"payload %d" % i) for i in range(200)]
    produce(cluster.bootstrap, "copy-in", src)
    query = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", "copy-in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "70")
        .load()
        .select("key", F.upper("value").alias("value"), "partition")
        .writeStream.format("headwater")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", "copy-out")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive
    got = sorted(
        (r.partition, bytes(r.key), bytes(r.value))
        for r in _read_all(spark, cluster.bootstrap, "copy-out")
    )
    assert got == sorted((p, k, v.upper()) for p, k, v in src)
