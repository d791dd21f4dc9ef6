"""The broker's own Prometheus metrics (per-RPC counts and latency live in headwater.rpc.metrics).

Label cardinality: ``topic`` for throughput counters, ``topic`` + ``partition`` for the log
size gauge (removed when the partition leaves this broker).
"""

from __future__ import annotations

import contextlib

import prometheus_client as prom

BYTES_IN = prom.Counter(
    "headwater_broker_bytes_in_total", "Record-batch bytes appended, by topic", ["topic"]
)
BYTES_OUT = prom.Counter(
    "headwater_broker_bytes_out_total", "Record-batch bytes sent to fetchers, by topic", ["topic"]
)
RECORDS_IN = prom.Counter(
    "headwater_broker_records_in_total", "Records appended, by topic", ["topic"]
)
LOG_SIZE = prom.Gauge(
    "headwater_broker_log_size_bytes",
    "Bytes on disk of a partition's log segments",
    ["topic", "partition"],
)
PARTITIONS = prom.Gauge(
    "headwater_broker_partitions", "Partitions hosted by this broker, by role", ["role"]
)

REPLICA_FETCH_WAITING = prom.Gauge(
    "headwater_broker_replica_fetch_waiting",
    "Follower fetch requests parked in a long poll on this leader, by follower id",
    ["replica"],
)


def set_log_size(topic: str, partition: int, size: int) -> None:
    LOG_SIZE.labels(topic, str(partition)).set(size)


def forget_partition(topic: str, partition: int) -> None:
    with contextlib.suppress(KeyError):
        LOG_SIZE.remove(topic, str(partition))
