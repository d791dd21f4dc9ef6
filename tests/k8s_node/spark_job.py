"""The Spark job of test_spark_on_k8s.py (and of the example in docs/spark.md, "Spark on
Kubernetes"): PySpark in local mode in a pod of the ``headwater-spark`` image reads a topic with
``spark.read.format("headwater")`` through the chart's bootstrap Service and writes, per input
partition, one record of counts to a result topic with ``df.write.format("headwater")``.

Mounted from a ConfigMap beside records_job.py (whose checksum it reuses):

    python3 /job/spark_job.py --bootstrap B --topic T --result R [--driver-memory 512m]

Result records: key = the input partition (decimal), value = JSON ``{"count": records,
"distinct_keys": distinct keys, "value_bytes": sum of the values' lengths}``.

The report is one JSON object, printed and written to the container's termination message
(``/dev/termination-log``), where the test reads it from the pod's status:

- ``count``, ``distinct_keys``, ``sha256``, ``partitions``: what the read returned, as
  records_job.py reports it (the same order-independent SHA-256 of the (key, value) pairs);
- ``written``: the result records written (one per input partition);
- ``driver_max_heap``: the driver JVM's ``Runtime.maxMemory()`` (``spark.driver.memory`` reached
  the JVM: it is given before the JVM starts);
- ``spark_version``; ``seconds``: from the session's creation to the end of the write.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

import headwater_spark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from records_job import TERMINATION_LOG, digest  # beside this file in the ConfigMap


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="the bootstrap Service, host:port")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--result", required=True, help="the topic the counts go to")
    parser.add_argument("--driver-memory", default="512m", help="spark.driver.memory")
    parser.add_argument("--cores", type=int, default=2, help="local[N]")
    args = parser.parse_args(argv)

    start = time.monotonic()
    spark = (
        SparkSession.builder.master(f"local[{args.cores}]")
        .appName("headwater-spark-on-k8s")
        # set before the JVM starts: pyspark passes it to spark-submit (local mode: the driver
        # is the executor, so this bounds the whole JVM heap)
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(args.cores))
        .getOrCreate()
    )
    try:
        headwater_spark.register(spark)
        df = (
            spark.read.format("headwater")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("subscribe", args.topic)
            .load()
            .cache()
        )
        rows = df.select("key", "value", "partition").collect()
        pairs = [(bytes(r.key or b""), bytes(r.value or b"")) for r in rows]
        partitions = Counter(r.partition for r in rows)

        counts = df.groupBy("partition").agg(
            F.count("*").alias("count"),
            F.countDistinct("key").alias("distinct_keys"),
            F.sum(F.length("value")).alias("value_bytes"),
        )
        result = counts.select(
            F.col("partition").cast("string").alias("key"),
            F.to_json(F.struct("count", "distinct_keys", "value_bytes")).alias("value"),
        ).cache()
        written = result.count()
        (
            result.write.format("headwater")
            .mode("append")  # Spark's Kafka sink takes append (the default is ErrorIfExists)
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("topic", args.result)
            .save()
        )
        runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()  # type: ignore[union-attr]
        report = {
            "count": len(pairs),
            "distinct_keys": len({k for k, _ in pairs}),
            "sha256": digest(pairs),
            "partitions": {str(p): n for p, n in sorted(partitions.items())},
            "written": written,
            "driver_max_heap": int(runtime.maxMemory()),
            "spark_version": spark.version,
            "seconds": round(time.monotonic() - start, 1),
        }
    finally:
        spark.stop()
    text = json.dumps(report, sort_keys=True)
    print(text, flush=True)
    if os.path.exists(TERMINATION_LOG):
        with open(TERMINATION_LOG, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
