"""What a ``headwater`` streaming query's start costs in Spark's stream-reader runner.

Spark starts ``pyspark.sql.streaming.python_streaming_source_runner`` in a new Python process
per streaming query; it unpickles the data source (importing ``headwater_spark.source`` and
``.stream``) and calls ``initialOffset``, ``prepareForTriggerAvailableNow``, ``latestOffset``
and ``partitions`` before the first micro-batch. This replays that path in new processes
against a local cluster (one broker, a 16-partition topic) and reports, per process: the
runner's own imports (Spark's), the imports ``headwater_spark`` adds on top, each call's time,
the partition lookups made (``list_topics``) and which ``headwater.client`` modules got
loaded. ``-X importtime`` per module: run the child line printed with ``--show-child``.

    python bench/spark_stream_start.py [--runs 5] [--partitions 16] [--json out.json]

To compare with another checkout, run it with ``PYTHONPATH=<that>/:<that>/spark`` (the
child processes inherit it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from headwater.dev.cluster import LocalCluster
from tests.helpers.spark import make_topic, produce

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import pyspark.sql.streaming.python_streaming_source_runner  # Spark's runner and its imports
t1 = time.perf_counter()
import headwater_spark.source, headwater_spark.stream
t2 = time.perf_counter()
from pyspark.sql.streaming.datasource import ReadAllAvailable
bootstrap, topic = sys.argv[1], sys.argv[2]
ds = headwater_spark.source.HeadwaterDataSource(
    {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
)
reader = ds.streamReader(None)
admin = reader.resolver.admin
lookups = 0
list_topics = admin.list_topics
def counted(*a, **k):
    global lookups
    lookups += 1
    return list_topics(*a, **k)
admin.list_topics = counted
t3 = time.perf_counter()
start = reader.initialOffset()
t4 = time.perf_counter()
reader.prepareForTriggerAvailableNow()
t5 = time.perf_counter()
end = reader.latestOffset(start, ReadAllAvailable())
t6 = time.perf_counter()
parts = reader.partitions(start, end)
t7 = time.perf_counter()
reader.stop()
print(json.dumps({
    "runner_imports_s": t1 - t0, "headwater_imports_s": t2 - t1,
    "make_reader_s": t3 - t2, "initialOffset_s": t4 - t3,
    "prepareForTriggerAvailableNow_s": t5 - t4, "latestOffset_s": t6 - t5,
    "partitions_s": t7 - t6, "to_first_batch_s": t7 - t1, "list_topics_calls": lookups,
    "tasks": len(parts),
    "client_modules": sorted(m for m in sys.modules if m.startswith("headwater.client.")),
}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--show-child", action="store_true", help="print the child's code")
    args = ap.parse_args()
    if args.show_child:
        print(CHILD)
        return
    with (
        tempfile.TemporaryDirectory(prefix="hw-stream-start-") as tmp,
        LocalCluster(Path(tmp), brokers=1, controllers=1) as cluster,
    ):
        make_topic(cluster.bootstrap, "start", args.partitions)
        produce(cluster.bootstrap, "start", [(p, None, b"x" * 100) for p in range(args.partitions)])
        runs: list[dict[str, Any]] = []
        for _ in range(args.runs):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, cluster.bootstrap, "start"],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
                env=dict(os.environ),
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    keys = [k for k in runs[0] if k.endswith("_s")]
    summary = {k: statistics.median(r[k] for r in runs) for k in keys}
    for k in keys:
        print(f"{k:34} median {summary[k]:.3f} s   runs {[round(r[k], 3) for r in runs]}")
    print(f"list_topics calls per start: {[r['list_topics_calls'] for r in runs]}")
    print(f"headwater.client modules loaded: {len(runs[0]['client_modules'])}")
    if args.json:
        args.json.write_text(json.dumps({"median": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
