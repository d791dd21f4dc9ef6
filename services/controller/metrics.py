"""The controller's Prometheus metrics (per-RPC counts and latency live in
headwater.platform.metrics).

Every controller process exports these; only the active one has non-zero partition gauges
(a standby's are 0), so ``sum(headwater_controller_active)`` over all controllers is the
cluster's active controller count (1 when healthy) and ``max`` of a partition gauge over
controllers is the cluster value.

Leader elections are counted where partition states are written
(:func:`observe_transition`): a change of leader to a live broker is an election; it is
*unclean* when the new leader was not in the previous ISR. Gauges are recomputed from the
loop's state after every event (:func:`refresh`), on the event-loop task that owns it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import prometheus_client as prom

ACTIVE = prom.Gauge("headwater_controller_active", "1 while this controller is the active one")
EPOCH = prom.Gauge("headwater_controller_epoch", "Controller epoch while active (0 standby)")
LIVE_BROKERS = prom.Gauge("headwater_controller_live_brokers", "Registered brokers (active)")
BROKER_RESETS = prom.Counter(
    "headwater_controller_broker_resets_total",
    "Brokers declared dead from a reset connection (before their lease expired)",
)
EVENTS = prom.Counter("headwater_controller_events_total", "Events processed", ["kind"])

PARTITIONS = prom.Gauge(
    "headwater_controller_partitions", "Partitions in the cluster (active controller; 0 standby)"
)
OFFLINE_PARTITIONS = prom.Gauge(
    "headwater_controller_offline_partitions",
    "Partitions without a leader (leader -1): unavailable for produce and fetch "
    "(active controller; 0 standby)",
)
OFFLINE_REPLICAS = prom.Gauge(
    "headwater_controller_offline_replicas",
    "Replicas a live broker refused to host (KAFKA_STORAGE_ERROR, e.g. its open-file limit): "
    "never leaders, not in the ISR (active controller; 0 standby)",
)
LEADER_ELECTIONS = prom.Counter(
    "headwater_controller_leader_elections_total",
    "Partition leader changes to a live broker written by this controller (failover, "
    "preferred-leader election, controlled shutdown, reassignment, an offline partition's "
    "leader returning)",
)
UNCLEAN_LEADER_ELECTIONS = prom.Counter(
    "headwater_controller_unclean_leader_elections_total",
    "Leader elections whose new leader was not in the previous ISR (possible data loss)",
)


def observe_transition(old: Any | None, new: Any) -> None:
    """Count the election, if any, of one written partition state (``state.PartitionState``;
    ``old`` None for a partition written for the first time, never an election)."""
    if old is None or new.leader < 0 or new.leader == old.leader:
        return
    LEADER_ELECTIONS.inc()
    if new.leader not in old.isr:
        UNCLEAN_LEADER_ELECTIONS.inc()


def refresh(partitions: Mapping[Any, Any] | None, offline_replicas: int = 0) -> None:
    """Recompute the partition gauges from the active controller's partition states (None:
    standby, all 0) and its count of offline replicas."""
    OFFLINE_REPLICAS.set(offline_replicas if partitions is not None else 0)
    if partitions is None:
        PARTITIONS.set(0)
        OFFLINE_PARTITIONS.set(0)
        return
    PARTITIONS.set(len(partitions))
    OFFLINE_PARTITIONS.set(sum(1 for s in partitions.values() if s.leader < 0))
