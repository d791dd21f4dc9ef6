"""A streaming copy job run as its own process (own JVM) by test_sink_exactly_once.py, which
kills it with SIGKILL mid-run: headwater topic -> headwater topic with exactlyOnce=true.

argv: bootstrap source_topic sink_topic checkpoint_dir transactional_id_prefix max_offsets
"""

from __future__ import annotations

import os
import sys

import headwater_spark
from pyspark.sql import SparkSession


def main() -> None:
    bootstrap, source, sink, checkpoint, prefix, max_offsets = sys.argv[1:7]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-eo-job")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    headwater_spark.register(spark)
    query = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
        .select("key", "value")
        .writeStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", prefix)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
