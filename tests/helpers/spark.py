"""Making topics and producing records for the Spark suites (tests/spark)."""

from __future__ import annotations

from typing import Any

from headwater.client import AdminClient, Producer
from tests.helpers.wait import wait_for


def make_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    """Create ``name`` (RF 1) and wait, bounded, until every partition has a leader."""
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


def stream_from_earliest(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    """``spark.readStream.format("headwater")`` of ``topic`` from its earliest offsets, with
    ``options`` added; the loaded streaming DataFrame."""
    reader = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()
