"""headwater_spark.worker_gc: a Python worker freezes its start-up state once, after its first
read, so PySpark's full collection after each task walks only what later tasks made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.helpers.spark import make_topic, produce

pytestmark = pytest.mark.timeout(1200)

_PROBE = """
import gc, json, weakref
from headwater_spark.worker_gc import freeze_once

gc.disable()  # only freeze_once collects

class Node:
    pass

garbage = Node(); garbage.self = garbage  # a cycle only the collector can free
dead = weakref.ref(garbage)
del garbage
kept = [Node() for _ in range(1000)]
before = gc.get_freeze_count()
freeze_once()
first = gc.get_freeze_count()
more = [Node() for _ in range(1000)]
freeze_once()
second = gc.get_freeze_count()
print(json.dumps({"before": before, "first": first, "second": second,
                  "garbage_freed": dead() is None}))
"""


def test_the_first_call_collects_then_freezes_and_later_calls_do_nothing() -> None:
    """Run in a child process: freezing is for the life of a process."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    got = json.loads(out)
    assert got["before"] == 0
    assert got["first"] >= 1000  # the live objects, the 1000 kept ones among them
    assert got["second"] == got["first"]  # the second call froze nothing more
    assert got["garbage_freed"]  # collected first: garbage is not frozen forever


def test_spark_workers_that_read_have_frozen_their_start_up_state(spark: Any, cluster: Any) -> None:
    """After a batch read through a real SparkSession, the Python workers that read (those
    whose consumer pool opened a consumer) report a non-empty permanent generation."""
    from pyspark.sql.functions import udf

    bootstrap = cluster.bootstrap
    make_topic(bootstrap, "frozen", 2)
    produce(bootstrap, "frozen", [(i % 2, None, b"v%d" % i) for i in range(40)])
    df = spark.read.format("headwater").option("kafka.bootstrap.servers", bootstrap)
    rows = df.option("subscribe", "frozen").load().collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(b"v%d" % i for i in range(40))

    @udf("string", useArrow=False)  # the Arrow-optimized UDF needs pandas
    def probe(_id: int) -> str:
        import gc

        from headwater_spark.consumer_pool import POOL

        return f"{os.getpid()} {POOL.stats().opened} {gc.get_freeze_count()}"

    seen = {}
    for r in spark.range(0, 8, 1, 8).select(probe("id").alias("s")).collect():
        pid, opened, frozen = (int(x) for x in r.s.split())
        seen[pid] = (opened, frozen)
    readers = {pid: frozen for pid, (opened, frozen) in seen.items() if opened > 0}
    assert readers, seen
    assert all(frozen > 0 for frozen in readers.values()), seen
