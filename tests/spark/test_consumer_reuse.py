"""A real SparkSession reuses read consumers across tasks and jobs (the per-worker pool,
headwater_spark.consumer_pool) and still reads every record exactly once."""

from __future__ import annotations

import os
from typing import Any

import pytest
from headwater_spark.consumer_pool import PoolStats

from tests.helpers.spark import make_topic, produce

pytestmark = pytest.mark.timeout(1200)

PARTITIONS = 4
PER_PARTITION = 60
PER_TASK = 20  # maxRecordsPerPartition: 3 tasks per partition, 12 per read


def _pool_stats(spark: Any) -> dict[int, PoolStats]:
    """Each Python worker's pool counters, by worker pid. Collected by a Python UDF, which
    Spark runs in the same worker processes as a Python data source's reads; several tasks so
    every idle worker answers."""
    from pyspark.sql.functions import udf

    @udf("string", useArrow=False)  # the Arrow-optimized UDF needs pandas
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


def test_tasks_and_jobs_reuse_pooled_consumers_and_read_everything_once(
    spark: Any, cluster: Any
) -> None:
    """Two batch reads split into 12 tasks each (maxRecordsPerPartition): 24 reads in at most
    two worker processes (local[2]), each of which opens one consumer and reuses it for its
    later tasks, in this job and the next; both reads return exactly the topic's records.
    (Streaming micro-batches plan the same tasks through the same read path; a streaming
    query's runner start is what this avoids: on a loaded machine Spark's fixed 10 s for a
    new runner process to connect back can run out.)"""
    bootstrap = cluster.bootstrap
    make_topic(bootstrap, "pooled", PARTITIONS)
    produce(
        bootstrap,
        "pooled",
        [(i % PARTITIONS, None, b"v%d" % i) for i in range(PARTITIONS * PER_PARTITION)],
    )
    want = sorted(
        (i % PARTITIONS, i // PARTITIONS, b"v%d" % i) for i in range(PARTITIONS * PER_PARTITION)
    )
    before = _pool_stats(spark)
    tasks = 0
    for _ in range(2):
        df = (
            spark.read.format("headwater")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "pooled")
            .option("maxRecordsPerPartition", str(PER_TASK))
            .load()
        )
        tasks += df.rdd.getNumPartitions()
        got = sorted((r.partition, r.offset, bytes(r.value)) for r in df.collect())
        assert got == want
    assert tasks == 2 * PARTITIONS * PER_PARTITION // PER_TASK

    after = _pool_stats(spark)
    zero = PoolStats(0, 0, 0, 0)
    opened = sum(s.opened - before.get(pid, zero).opened for pid, s in after.items())
    reused = sum(s.reused - before.get(pid, zero).reused for pid, s in after.items())
    assert reused > 0, (before, after)
    assert opened + reused == tasks, (before, after)
    assert opened <= len(after), (before, after)
