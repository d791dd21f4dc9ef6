"""The broker's own Prometheus metrics (per-RPC counts and latency live in headwater.rpc.metrics).

Label cardinality: ``topic`` for throughput counters (plus a fixed ``reason`` / ``kind`` for the
idempotence and transaction counters), ``topic`` + ``partition`` for the log
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

PRODUCE_DUPLICATES = prom.Counter(
    "headwater_broker_produce_duplicates_total",
    "Idempotent produce entries answered as duplicates (nothing appended), by topic",
    ["topic"],
)
PRODUCER_REJECTIONS = prom.Counter(
    "headwater_broker_producer_rejections_total",
    "Produce entries and transaction markers refused by a partition's producer-state checks, "
    "by topic and reason (fenced, out_of_order, unknown_producer_id, invalid_txn_state, "
    "coordinator_fenced)",
    ["topic", "reason"],
)
TXN_MARKERS = prom.Counter(
    "headwater_broker_txn_markers_total",
    "Transaction markers appended as leader, by topic and kind (commit, abort)",
    ["topic", "kind"],
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
