"""A streaming job run as its own process (own JVM) by test_stream.py, which kills it with
SIGKILL mid-run: headwater topic -> parquet files, checkpointed.

argv: bootstrap topic checkpoint_dir output_dir max_offsets_per_trigger
"""

from __future__ import annotations

import os
import sys

import headwater_spark
from pyspark.sql import SparkSession


def main() -> None:
    bootstrap, topic, checkpoint, output, max_offsets = sys.argv[1:6]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-stream-job")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    headwater_spark.register(spark)
    df = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
    )
    query = (
        df.select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
