"""The coordinator's Prometheus metrics (per-RPC counts and latency live in
headwater.platform.metrics).

Lag and members are gauges refreshed every ``metrics_interval_s`` (default 5 s) by
``services.coordinator.app.refresh_metrics`` for the groups of the ``__consumer_offsets``
partitions this process owns; a series disappears when its group or partition is no longer
owned here (so a group is exported by exactly one coordinator). Rebalances are counted and
timed when their completion is committed to the offsets log.
"""

from __future__ import annotations

import prometheus_client as prom

GROUP_LAG = prom.Gauge(
    "headwater_coordinator_group_lag",
    "Records between a group's committed offset and the partition's end offset "
    "(high watermark), per group and partition",
    ["group", "topic", "partition"],
)
GROUP_MEMBERS = prom.Gauge("headwater_coordinator_group_members", "Members of the group", ["group"])
REBALANCES = prom.Counter(
    "headwater_coordinator_rebalances_total", "Rebalances completed, by group", ["group"]
)
REBALANCE_DURATION = prom.Histogram(
    "headwater_coordinator_rebalance_duration_seconds",
    "Time from a rebalance's start (PreparingRebalance) to its completion (Stable), by group",
    ["group"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)


def observe_rebalance(group_id: str, duration_ms: int) -> None:
    """One completed rebalance of ``group_id`` that took ``duration_ms``."""
    REBALANCES.labels(group_id).inc()
    REBALANCE_DURATION.labels(group_id).observe(max(0, duration_ms) / 1000.0)
