"""The broker's own Prometheus metrics (per-RPC counts and latency live in
headwater.platform.metrics).

Label cardinality: ``topic`` for throughput counters (plus a fixed ``reason`` / ``kind`` for the
idempotence and transaction counters), ``topic`` + ``partition`` for the log
size gauge (removed when the partition leaves this broker).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any

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

PARTITIONS_REFUSED = prom.Counter(
    "headwater_broker_partitions_refused_total",
    "New partitions a LeaderAndIsr named that this broker refused to host, by reason "
    "(descriptors: the open-file limit would leave too few for connections)",
    ["reason"],
)

PRODUCE_DUPLICATES = prom.Counter(
    "headwater_broker_produce_duplicates_total",
    "Idempotent produce entries answered as duplicates (nothing appended), by topic",
    ["topic"],
)
PRODUCE_ERRORS = prom.Counter(
    "headwater_broker_produce_errors_total",
    "Produce entries answered with an error (nothing appended, or appended and not "
    "acknowledged in time), by topic and error code name",
    ["topic", "error"],
)
PRODUCER_REJECTIONS = prom.Counter(
    "headwater_broker_producer_rejections_total",
    "Produce entries and transaction markers refused by a partition's producer-state checks, "
    "by topic and reason (fenced, out_of_order, unknown_producer_id, invalid_txn_state, "
    "coordinator_fenced)",
    ["topic", "reason"],
)
PRODUCE_REORDER_WAITS = prom.Counter(
    "headwater_broker_produce_reorder_waits_total",
    "Produce entries that arrived ahead of their producer's next sequence and waited for the "
    "earlier batches (concurrent requests received out of order), by topic",
    ["topic"],
)
PRODUCE_ORDER_WAITS = prom.Counter(
    "headwater_broker_produce_order_waits_total",
    "Numbered produce requests (ProduceRequest.order_*) that arrived before the earlier request "
    "they name had appended and waited for it",
)
PRODUCE_ORDER_WAIT_TIMEOUTS = prom.Counter(
    "headwater_broker_produce_order_wait_timeouts_total",
    "Numbered produce requests whose wait for the earlier request ended at the bound (1 s or "
    "the request's timeout) and went on without it",
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


#: (topic, partition) -> (segments, size) as last set on the log-shape gauges: the periodic
#: refresh sets only what changed (a broker with thousands of idle partitions spent most of
#: its idle CPU looking up their label children every second).
_shape: dict[tuple[str, int], tuple[int, int]] = {}


def set_log_size(topic: str, partition: int, size: int) -> None:
    LOG_SIZE.labels(topic, str(partition)).set(size)
    segments = _shape.get((topic, partition), (-1, -1))[0]
    _shape[(topic, partition)] = (segments, size)


def forget_partition(topic: str, partition: int) -> None:
    _shape.pop((topic, partition), None)
    with contextlib.suppress(KeyError):
        LOG_SIZE.remove(topic, str(partition))
    with contextlib.suppress(KeyError):
        LOG_SEGMENTS.remove(topic, str(partition))


# ---- replication health, log shape and records out (issue 6 part 3) ----------------------
# The replication-health gauges are computed when scraped (:func:`health_when_scraped`), the
# log-shape gauges by :func:`refresh_log_shapes` (a periodic broker task on the event loop),
# counters are incremented where the event happens.

RECORDS_OUT = prom.Counter(
    "headwater_broker_records_out_total",
    "Records sent to consumers by Fetch (whole batches, so may include records before the "
    "requested offset), by topic",
    ["topic"],
)
UNDER_REPLICATED = prom.Gauge(
    "headwater_broker_under_replicated_partitions",
    "Partitions led by this broker whose ISR is smaller than their replica set",
)
AT_MIN_ISR = prom.Gauge(
    "headwater_broker_at_min_isr_partitions",
    "Partitions led by this broker whose ISR size equals min.insync.replicas",
)
UNDER_MIN_ISR = prom.Gauge(
    "headwater_broker_under_min_isr_partitions",
    "Partitions led by this broker whose ISR is below min.insync.replicas (acks=all refused)",
)
LOG_SEGMENTS = prom.Gauge(
    "headwater_broker_log_segments",
    "Segments of a partition's log",
    ["topic", "partition"],
)
ISR_SHRINKS = prom.Counter(
    "headwater_broker_isr_shrinks_total",
    "ISR changes of partitions led by this broker that removed replicas",
)
ISR_EXPANDS = prom.Counter(
    "headwater_broker_isr_expands_total",
    "ISR changes of partitions led by this broker that added replicas",
)

_BATCH_LENGTH_AT = 8
_RECORD_COUNT_AT = 60
_LOG_OVERHEAD = 12


def count_records(data: bytes | bytearray | memoryview) -> int:
    """Records in a buffer of whole, concatenated record batches (header fields only; a
    truncated trailing batch is not counted)."""
    n = pos = 0
    end = len(data)
    while pos + 64 <= end:
        length = int.from_bytes(data[pos + _BATCH_LENGTH_AT : pos + _BATCH_LENGTH_AT + 4], "little")
        n += int.from_bytes(data[pos + _RECORD_COUNT_AT : pos + _RECORD_COUNT_AT + 4], "little")
        if length <= 0:
            break
        pos += _LOG_OVERHEAD + length
    return n


def observe_isr_change(old: tuple[int, ...], new: tuple[int, ...]) -> None:
    """Count one ISR change of a led partition as a shrink and/or an expand."""
    if set(old) - set(new):
        ISR_SHRINKS.inc()
    if set(new) - set(old):
        ISR_EXPANDS.inc()


def replication_health(partitions: Iterable[Any]) -> tuple[int, int, int]:
    """(under-replicated, at min ISR, under min ISR) among the led partitions of
    ``partitions`` (``services.broker.partition.Partition``: ``is_leader``, ``replicas``,
    ``isr``, ``config.min_insync_replicas``, ``log``)."""
    under = at_min = under_min = 0
    for p in partitions:
        if not p.is_leader or p.log.closed:
            continue
        isr = len(p.isr)
        min_isr = p.config.min_insync_replicas
        under += isr < len(p.replicas)
        at_min += isr == min_isr
        under_min += isr < min_isr
    return under, at_min, under_min


def health_when_scraped(partitions: Callable[[], Iterable[Any]]) -> None:
    """Compute the replication-health gauges from ``partitions()`` when they are scraped,
    instead of walking every hosted partition every second whether anyone looks or not
    (with thousands of partitions that walk was most of an idle broker's CPU). The scrape
    runs in the metrics server's thread: ``partitions()`` must be safe to copy there (a
    dict's ``values``: copied by one C call under the GIL); a partition changing meanwhile
    is counted as it was or as it is."""

    def count(which: int) -> float:
        return float(replication_health(list(partitions()))[which])

    UNDER_REPLICATED.set_function(lambda: count(0))
    AT_MIN_ISR.set_function(lambda: count(1))
    UNDER_MIN_ISR.set_function(lambda: count(2))


def refresh_log_shapes(partitions: Iterable[Any]) -> None:
    """Set the log-shape gauges of the hosted ``partitions`` (``topic``, ``partition``,
    ``log``) whose segment count or size changed since they were last set. Call on the
    loop."""
    for p in partitions:
        if not p.log.closed:
            _refresh_shape(p)


def _refresh_shape(p: Any) -> None:
    key = (p.topic, p.partition)
    shape = (p.log.num_segments, int(p.log.size_in_bytes))
    last = _shape.get(key)
    if last != shape:
        _shape[key] = shape
        if last is None or last[0] != shape[0]:
            LOG_SEGMENTS.labels(p.topic, str(p.partition)).set(shape[0])
        if last is None or last[1] != shape[1]:
            LOG_SIZE.labels(p.topic, str(p.partition)).set(shape[1])


async def refresh_every(interval_s: float, partitions: Callable[[], Iterable[Any]]) -> None:
    """Run :func:`refresh_log_shapes` every ``interval_s`` seconds (until cancelled). A log's
    size is also set at each append (``set_log_size``); its segment count changes at a roll
    or retention, so a period of many seconds is enough."""
    while True:
        refresh_log_shapes(list(partitions()))
        await asyncio.sleep(interval_s)


# Quotas (docs/quotas.md). ``type``: produce | fetch | request. ``user``/``client_id``: the
# quota group's tags (services/broker/quotas/entities.py); series of a group idle for a while
# are removed.
QUOTA_RATE = prom.Gauge(
    "headwater_broker_quota_rate",
    "Rate measured over the quota window, by quota type and group: bytes/s for produce and "
    "fetch, percent of one thread's time for request",
    ["type", "user", "client_id"],
)
QUOTA_LIMIT = prom.Gauge(
    "headwater_broker_quota_limit",
    "The quota applying to the group (same unit as headwater_broker_quota_rate)",
    ["type", "user", "client_id"],
)
QUOTA_VALUE = prom.Counter(
    "headwater_broker_quota_recorded_total",
    "What was recorded against the quota: bytes for produce and fetch, percent-seconds of "
    "handling time for request",
    ["type", "user", "client_id"],
)
QUOTA_THROTTLE_SECONDS = prom.Counter(
    "headwater_broker_quota_throttle_seconds_total",
    "Throttle delay imposed on the group's clients, seconds",
    ["type", "user", "client_id"],
)
QUOTA_THROTTLED = prom.Counter(
    "headwater_broker_quota_throttled_total",
    "Responses that carried (or requests that caused) a throttle delay",
    ["type", "user", "client_id"],
)
QUOTA_REQUEST_SECONDS = prom.Counter(
    "headwater_broker_quota_request_time_seconds_total",
    "Time spent running client request handlers on the event loop, by (user, client-id)",
    ["user", "client_id"],
)


def forget_quota_group(kind: str, user: str, client_id: str) -> None:
    for metric in (QUOTA_RATE, QUOTA_LIMIT, QUOTA_VALUE, QUOTA_THROTTLE_SECONDS, QUOTA_THROTTLED):
        with contextlib.suppress(KeyError):
            metric.remove(kind, user, client_id)
