"""Spark batch read throughput from Headwater: Arrow path vs row path, in one run.

Starts a local cluster (etcd, controller, one broker) in a temporary folder, fills one topic
of 100 B records and one of 1 KiB records (4 partitions each, bulk producer), then reads each
with ``spark.read.format("headwater")`` on a local[2] SparkSession twice: with
``arrowBatches=true`` (executors yield Arrow batches built from Headwater's batches) and
``arrowBatches=false`` (the row path: one Python tuple per record). Each read runs
``count(*), sum(length(value))`` so every value crosses into the JVM; a warm-up read starts
the Python workers first. Prints a Markdown table (and JSON with ``--json``).

    python bench/spark_read.py [--records-100 3000000] [--records-1k 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from headwater.client import AdminClient, Producer
from headwater.dev.cluster import LocalCluster

PARTITIONS = 4
CHUNK = 10_000


def fill(bootstrap: str, topic: str, n: int, size: int) -> None:
    with AdminClient(bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS, 1)
    value = b"x" * size
    with Producer(bootstrap, acks=1, linger_ms=5) as p:
        futures = []
        for start in range(0, n, CHUNK):
            count = min(CHUNK, n - start)
            futures.append(
                p.send_many(topic, [value] * count, partition=(start // CHUNK) % PARTITIONS)
            )
        p.flush()
        for f in futures:
            f.result(timeout=120)


def read(spark: Any, bootstrap: str, topic: str, arrow: bool) -> tuple[float, int, int]:
    df = (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("arrowBatches", "true" if arrow else "false")
        .load()
    )
    t0 = time.perf_counter()
    [row] = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()
    return time.perf_counter() - t0, int(row.n), int(row.b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records-100", type=int, default=3_000_000)
    ap.add_argument("--records-1k", type=int, default=1_000_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import headwater_spark
    from pyspark.sql import SparkSession

    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="hw-spark-bench-") as tmp,
        LocalCluster(Path(tmp), brokers=1, controllers=1) as cluster,
    ):
        bootstrap = cluster.bootstrap
        fill(bootstrap, "s100", args.records_100, 100)
        fill(bootstrap, "s1k", args.records_1k, 1024)
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        headwater_spark.register(spark)
        read(spark, bootstrap, "s1k", True)  # warm-up: Python workers, JIT of the plan
        for topic, size in (("s100", 100), ("s1k", 1024)):
            for arrow in (True, False):
                secs, n, nbytes = read(spark, bootstrap, topic, arrow)
                results.append(
                    {
                        "record_size": size,
                        "path": "arrow" if arrow else "rows",
                        "records": n,
                        "seconds": round(secs, 2),
                        "records_per_s": round(n / secs),
                        "mb_per_s": round(nbytes / secs / 1e6, 1),
                    }
                )
        spark.stop()
    if args.json:
        print(json.dumps(results, indent=2))
    print("| record size | path | records | seconds | records/s | MB/s (values) |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['record_size']} B | {r['path']} | {r['records']:,} | {r['seconds']} | "
            f"{r['records_per_s']:,} | {r['mb_per_s']} |"
        )
    by = {(r["record_size"], r["path"]): r for r in results}
    for size in (100, 1024):
        ratio = by[(size, "arrow")]["records_per_s"] / by[(size, "rows")]["records_per_s"]
        print(f"{size} B: Arrow path {ratio:.1f}x the row path")


if __name__ == "__main__":
    main()
