"""Streaming job: clicks per page and 1-minute event-time window, from a Headwater topic to a
result topic and to Parquet.

    python spark/pipeline/clicks_per_page.py --bootstrap 127.0.0.1:9092 \\
        --out ./data/spark/clicks_per_page --checkpoints ./data/spark/checkpoints

Two queries share the source definition:

* ``parquet``: append mode with a 1-minute watermark; a window's row is written once, when the
  watermark passes its end. With the file sink and the checkpoint, each window is written
  exactly once, across restarts.
* ``topic``: the same closed windows into ``--result-topic`` (key = page, value = JSON with
  window, page, count). Python data source sinks support append mode only; the Headwater
  sink is at-least-once (a micro-batch re-run after a crash writes its windows again).

``--available-now`` processes what is in the topic and stops (the default keeps running with
a 2-second processing-time trigger).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import headwater_spark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

EVENT = "user string, page string, ts long"


def counts(spark: Any, bootstrap: str, topic: str) -> Any:
    """Clicks per (1-minute window, page) with a 1-minute watermark on event time."""
    raw = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "50000")
        .load()
    )
    events = raw.select(F.from_json(F.col("value").cast("string"), EVENT).alias("e")).select(
        "e.user", "e.page", (F.col("e.ts") / 1000).cast("timestamp").alias("event_time")
    )
    return (
        events.withWatermark("event_time", "1 minute")
        .groupBy(F.window("event_time", "1 minute"), "page")
        .count()
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "page",
            "count",
        )
    )


def start(
    spark: Any,
    *,
    bootstrap: str,
    topic: str,
    result_topic: str,
    out: str,
    checkpoints: str,
    available_now: bool,
) -> list[Any]:
    """Start both queries; returns them (callers await or stop them)."""
    agg = counts(spark, bootstrap, topic)

    def trigger(w: Any) -> Any:
        return (
            w.trigger(availableNow=True) if available_now else w.trigger(processingTime="2 seconds")
        )

    to_parquet = trigger(
        agg.writeStream.format("parquet")
        .outputMode("append")
        .option("path", out)
        .option("checkpointLocation", os.path.join(checkpoints, "parquet"))
    ).start()
    to_topic = trigger(
        agg.select(
            F.col("page").alias("key"),
            F.to_json(F.struct("window_start", "window_end", "page", "count")).alias("value"),
        )
        .writeStream.format("headwater")
        .outputMode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", result_topic)
        .option("checkpointLocation", os.path.join(checkpoints, "topic"))
    ).start()
    return [to_parquet, to_topic]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--result-topic", default="clicks-per-page")
    ap.add_argument("--out", default="./data/spark/clicks_per_page")
    ap.add_argument("--checkpoints", default="./data/spark/checkpoints")
    ap.add_argument("--available-now", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
        .appName("clicks-per-page")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    headwater_spark.register(spark)
    from generate_clicks import ensure_topic

    ensure_topic(args.bootstrap, args.result_topic, 1)
    queries = start(
        spark,
        bootstrap=args.bootstrap,
        topic=args.topic,
        result_topic=args.result_topic,
        out=args.out,
        checkpoints=args.checkpoints,
        available_now=args.available_now,
    )
    for q in queries:
        q.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
