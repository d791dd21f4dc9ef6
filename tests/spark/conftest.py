"""Spark fixtures: one real local[2] SparkSession per test session (one JVM), the
``headwater`` format registered, and helpers to make topics and produce records.

The SparkSession's Python workers run this interpreter (PYSPARK_PYTHON), so they import
``headwater_spark`` and ``headwater.client`` from the same installation as the tests.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import headwater_spark
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")  # loopback only
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    headwater_spark.register(session)
    try:
        yield session
    finally:
        session.stop()
