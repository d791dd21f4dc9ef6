"""PySpark data source and sink for Headwater (format ``"headwater"``); see docs/spark.md.

Usage::

    import headwater_spark
    headwater_spark.register(spark)
    df = (spark.read.format("headwater")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Layers: ``options`` and ``planning`` are pure logic; ``resolver`` (driver) and ``reader``
(executor) talk to the cluster through ``headwater.client`` only; ``arrow`` converts batches;
``source``, ``stream`` and ``sink`` are the PySpark classes.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``headwater`` format with a SparkSession."""
    from headwater_spark.source import HeadwaterDataSource

    spark.dataSource.register(HeadwaterDataSource)
