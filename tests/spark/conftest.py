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

from headwater.client import AdminClient, Producer
from tests.helpers.wait import wait_for


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


def make_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    with AdminClient(bootstrap) as admin:
        admin.create_topic(name, partitions, 1, configs or None)

        def ready() -> bool:
            try:
                [t] = admin.describe_topics([name])
            except Exception:
                return False
            return len(t.partitions) == partitions and all(p.leader >= 0 for p in t.partitions)

        wait_for(ready, timeout=30, what=f"topic {name} ready")


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[int, bytes | None, bytes]],
    *,
    timestamp: int | None = None,
    headers: list[tuple[str, bytes | None]] | None = None,
) -> list[Any]:
    """Send (partition, key, value) records; returns their RecordMetadata in order."""
    with Producer(bootstrap, acks="all", linger_ms=1) as p:
        futs = [
            p.send(topic, v, k, partition=part, timestamp=timestamp, headers=headers)
            for part, k, v in records
        ]
        p.flush()
        return [f.result(timeout=30) for f in futs]
