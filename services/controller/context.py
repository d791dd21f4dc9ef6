"""What the controller's commands need of the event loop: :class:`ControllerContext`.

The replication commands (:mod:`services.controller.operations`) and partition reassignment
(:mod:`services.controller.reassignment`) run on the event-loop task and read and change the
loop's state through this interface; :class:`services.controller.events.ControllerLoop`
implements it (structurally). Typing the commands against the interface rather than the
loop class keeps the loop's module, which dispatches to the commands, the only one that
imports the other side (no import cycle).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from headwater.platform import etcd as hetcd
from headwater.v1 import metadata_pb2
from services.controller import cluster_state as cs
from services.controller import state as st

PartitionKey = tuple[str, int]


class ControllerContext(Protocol):
    """The active controller's state and its effects, used only on the event-loop task.

    ``state`` and ``epoch`` are ``None`` while this controller is not the active one; ``state``
    changes only through ``state.apply`` (after the etcd write it records has succeeded)."""

    etcd: hetcd.Etcd
    state: cs.ClusterState | None
    epoch: int | None
    #: live brokers in controlled shutdown (never elected)
    shutting_down: set[int]
    #: the preferred-leader imbalance (percent of a broker's partitions) that triggers a
    #: rebalance
    imbalance_percent: float

    def offline_replicas(self, key: PartitionKey) -> frozenset[int]:
        """The brokers whose replica of ``key`` is offline: never elected
        (:mod:`services.controller.offline_replicas`)."""
        ...

    def keys_on(self, broker_id: int) -> list[PartitionKey]:
        """The partitions with ``broker_id`` among their replicas."""
        ...

    async def write(self, changes: dict[PartitionKey, st.PartitionState]) -> list[PartitionKey]:
        """Persist changed partition states (fenced) and adopt them; the keys written."""
        ...

    def partition_pb(self, key: PartitionKey) -> metadata_pb2.PartitionState:
        """The partition's state as sent to brokers."""
        ...

    def send_leader_and_isr(
        self,
        keys: Iterable[PartitionKey],
        *,
        only: int | None = None,
        exclude: int | None = None,
        leading: bool | None = None,
    ) -> None:
        """LeaderAndIsr for ``keys`` to their replica brokers."""
        ...

    def send_update_metadata(self) -> None:
        """The full metadata snapshot to every live broker."""
        ...

    def send_stop_replica(
        self, keys: Iterable[tuple[PartitionKey, list[int]]], delete: bool
    ) -> None:
        """StopReplica to each live broker holding one of ``keys`` (key, replicas)."""
        ...
