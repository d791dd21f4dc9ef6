"""What a ``headwater`` streaming query's start costs in Spark's stream-reader runner.

Spark starts ``pyspark.sql.streaming.python_streaming_source_runner`` in a new Python process
per streaming query; it unpickles the data source (importing ``headwater_spark.source`` and
``.stream``) and calls ``initialOffset``, ``prepareForTriggerAvailableNow``, ``latestOffset``
and ``partitions`` before the first micro-batch. This replays that path in new processes
against a local cluster (one broker, a 16-partition topic) and reports, per process: the
runner's own imports (Spark's), the imports ``headwater_spark`` adds on top (wall and CPU
seconds; CPU time is less moved by other load), each call's time, the partition lookups
made (``list_topics``) and which ``headwater.client`` modules got loaded. For ``-X importtime``
per module, run the child code (``--show-child``) with ``python -X importtime``.

    python bench/spark_stream_start.py [--runs 5] [--partitions 16] [--json out.json]
        [--compare OTHER_CHECKOUT]

``--compare DIR`` alternates the child processes between this checkout and DIR (e.g. an
earlier commit unpacked with ``git archive <commit> headwater spark | tar -x -C DIR``; its
children get ``PYTHONPATH=DIR:DIR/spark``), so both see the same machine load.
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
t0, c0 = time.perf_counter(), time.process_time()
import pyspark.sql.streaming.python_streaming_source_runner  # Spark's runner and its imports
t1, c1 = time.perf_counter(), time.process_time()
import headwater_spark.source, headwater_spark.stream
t2, c2 = time.perf_counter(), time.process_time()
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
    "runner_imports_cpu_s": c1 - c0, "headwater_imports_cpu_s": c2 - c1,
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
    ap.add_argument("--compare", type=Path, help="another checkout to alternate with")
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
        checkouts = {"this checkout": None}
        if args.compare:
            checkouts["compared"] = args.compare
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
        for _ in range(args.runs):
            for name, other in checkouts.items():
                runs[name].append(_child(cluster.bootstrap, other, Path(tmp)))
    results = {}
    for name, done in runs.items():
        keys = [k for k in done[0] if k.endswith("_s")]
        summary = {k: statistics.median(r[k] for r in done) for k in keys}
        print(f"== {name}{'' if name == 'this checkout' else f' ({args.compare})'}")
        for k in keys:
            print(f"{k:34} median {summary[k]:.3f} s   runs {[round(r[k], 3) for r in done]}")
        print(f"list_topics calls per start: {[r['list_topics_calls'] for r in done]}")
        print(f"headwater.client modules loaded: {len(done[0]['client_modules'])}")
        results[name] = {"median": summary, "runs": done}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def _child(bootstrap: str, other: Path | None, cwd: Path) -> dict[str, Any]:
    """One replay in a new interpreter (in ``cwd``, so the current folder adds nothing to
    its path), of this checkout or of ``other``."""
    env = dict(os.environ)
    if other is not None:
        env["PYTHONPATH"] = f"{other}:{other / 'spark'}"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, bootstrap, "start"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=env,
        cwd=cwd,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    main()
