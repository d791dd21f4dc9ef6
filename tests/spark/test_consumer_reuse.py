"""A real SparkSession reuses read consumers across tasks and micro-batches (the per-worker
pool, headwater_spark.consumer_pool) and still reads every record exactly once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from headwater_spark.consumer_pool import PoolStats

from tests.helpers.spark import make_topic, produce, stream_from_earliest

pytestmark = pytest.mark.timeout(1200)

PARTITIONS = 4
PER_PARTITION = 60
MAX_PER_TRIGGER = 80  # 240 records: 3 micro-batches of 4 tasks each


def _pool_stats(spark: Any) -> dict[int, PoolStats]:
    """Each Python worker's pool counters, by worker pid. Collected by a Python UDF, which
    Spark runs in the same worker processes as a Python data source's reads; several tasks so
    every idle worker answers."""
    from pyspark.sql.functions import udf

    @udf("string")
    def stats(_id: int) -> str:
        from headwater_spark.consumer_pool import POOL

        s = POOL.stats()
        return f"{os.getpid()} {s.opened} {s.reused} {s.closed}"

    rows = spark.range(0, 8, 1, 8).select(stats("id").alias("s")).collect()
    out = {}
    for r in rows:
        pid, opened, reused, closed = (int(x) for x in r.s.split())
        out[pid] = PoolStats(opened, reused, closed, 0)
    return out


def test_micro_batches_reuse_pooled_consumers_and_read_everything_once(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap
    make_topic(bootstrap, "pooled", PARTITIONS)
    produce(
        bootstrap,
        "pooled",
        [(i % PARTITIONS, None, b"v%d" % i) for i in range(PARTITIONS * PER_PARTITION)],
    )
    before = _pool_stats(spark)
    query = (
        stream_from_earliest(spark, bootstrap, "pooled", maxOffsetsPerTrigger=str(MAX_PER_TRIGGER))
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert not query.isActive and query.exception() is None
    batches = [p for p in query.recentProgress if p.numInputRows]
    assert len(batches) >= 3

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in rows)
    want = sorted(
        (i % PARTITIONS, i // PARTITIONS, b"v%d" % i) for i in range(PARTITIONS * PER_PARTITION)
    )
    assert got == want

    after = _pool_stats(spark)
    zero = PoolStats(0, 0, 0, 0)
    opened = sum(s.opened - before.get(pid, zero).opened for pid, s in after.items())
    reused = sum(s.reused - before.get(pid, zero).reused for pid, s in after.items())
    # 12 or more reads (3+ micro-batches x 4 partitions) in at most 2 workers (local[2]): each
    # worker opens one consumer and reuses it for its later reads
    assert reused > 0, (before, after)
    assert opened + reused >= len(batches) * PARTITIONS, (before, after)
    assert opened <= len(after), (before, after)
