"""One owned partition of ``__consumer_offsets``: its GroupTable and the group handlers.

:class:`PartitionRuntime` is a :class:`~services.coordinator.log_runtime.LogRuntime` (one task
per owned partition: epoch marker, replay, append-then-read-back before answering, fencing;
see that module) whose table is a :class:`GroupTable` and whose requests are the group
coordinator's: the pure handlers of ``membership`` / ``offsets`` / ``txn_offsets`` give an
:class:`Outcome`. Every ~150 ms ``membership.tick`` drives session / rebalance timeouts, and
every ~5 s ``offsets.expire`` writes retention tombstones. Parked requests (JoinGroup /
SyncGroup long polls) and queued ones get NOT_COORDINATOR in-band when the runtime stops.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headwater.client import AsyncProducer
from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import membership, offsets, txn_offsets
from services.coordinator.group import GroupTable
from services.coordinator.log_runtime import LogRuntime, PartitionLostError, Request
from services.coordinator.outcome import Ctx, Outcome

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
EXPIRE_EVERY_S = 5.0


def not_coordinator(kind: str, request: Any, msg: str = "not the coordinator") -> Any:
    """The in-band NOT_COORDINATOR answer for a request of ``kind``."""
    code = ErrorCode.NOT_COORDINATOR
    if kind == "join":
        return pb.JoinGroupResponse(error_code=code, error_message=msg)
    if kind == "sync":
        return pb.SyncGroupResponse(error_code=code, error_message=msg)
    if kind == "heartbeat":
        return pb.HeartbeatResponse(error_code=code, error_message=msg)
    if kind == "leave":
        return pb.LeaveGroupResponse(error_code=code, error_message=msg)
    if kind in ("commit", "txn_commit"):
        return pb.OffsetCommitResponse(error_code=code, error_message=msg)
    if kind == "txn_marker":
        return pb.WriteTxnOffsetMarkerResponse(error_code=code, error_message=msg)
    if kind == "fetch":
        return pb.OffsetFetchResponse(error_code=code, error_message=msg)
    if kind == "describe":
        group_id, _ends = request
        return pb.DescribedGroup(group_id=group_id, error_code=code)
    if kind == "delete":
        return pb.DeleteGroupsResult(group_id=request, error_code=code, error_message=msg)
    if kind == "list":
        return pb.ListGroupsResponse(error_code=code)
    raise PartitionLostError(msg)  # internal requests (tps, snapshot, rebalance)


@dataclass(frozen=True)
class GroupSnapshot:
    """What the metrics task needs of one group."""

    group_id: str
    members: int
    offsets: dict[tuple[str, int], int]
    state: str = ""  # GroupState value
    topics: frozenset[str] = frozenset()  # subscribed (consumer protocol metadata)
    generation: int = 0
    assigned: dict[str, int] | None = None  # offsets.assigned_counts of the members


class PartitionRuntime(LogRuntime[GroupTable]):
    """See the module docstring. Create, then run :meth:`run` as a task."""

    def __init__(
        self,
        *,
        partition: int,
        epoch: int,
        coordinator_id: int,
        producer: AsyncProducer,
        bootstrap: str,
        topic: str = OFFSETS_TOPIC,
        offsets_retention_ms: int = 7 * 24 * 3600 * 1000,
        append_timeout_s: float = 15.0,
        on_rebalance: Callable[[str, int], None] | None = None,
    ) -> None:
        super().__init__(
            partition=partition,
            epoch=epoch,
            coordinator_id=coordinator_id,
            producer=producer,
            bootstrap=bootstrap,
            topic=topic,
            table=GroupTable(),
            append_timeout_s=append_timeout_s,
        )
        self._retention_ms = offsets_retention_ms
        self._on_rebalance = on_rebalance
        self._ids = itertools.count(1)
        self._next_expire = time.monotonic() + EXPIRE_EVERY_S

    def _not_coordinator(self, kind: str, request: Any) -> Any:
        return not_coordinator(kind, request)

    def _summary(self) -> str:
        return f"{len(self._table.groups)} groups"

    async def _periodic(self) -> None:
        parked = {k for k, r in self._parked.items() if not r.future.done()}
        await self._commit(membership.tick(self._table, self._ctx(), parked))
        if time.monotonic() >= self._next_expire:
            self._next_expire = time.monotonic() + EXPIRE_EVERY_S
            await self._commit(offsets.expire(self._table, self._ctx()))

    def _ctx(self) -> Ctx:
        return Ctx(
            now_ms=int(time.time() * 1000),
            epoch=self.epoch,
            new_member_id=lambda client: f"{client or 'member'}-{uuid.uuid4().hex[:12]}",
            offsets_retention_ms=self._retention_ms,
        )

    async def _handle(self, req: Request) -> None:
        t, r, ctx = self._table, req.request, self._ctx()
        kind = req.kind
        if kind == "join":
            out = membership.join(t, r, ctx)
        elif kind == "sync":
            out = membership.sync(t, r, ctx)
        elif kind == "heartbeat":
            out = membership.heartbeat(t, r, ctx)
        elif kind == "leave":
            out = membership.leave(t, r, ctx)
        elif kind == "commit":
            out = offsets.commit(t, r, ctx)
        elif kind == "txn_commit":
            out = txn_offsets.txn_commit(t, r, ctx)
        elif kind == "txn_marker":
            out = txn_offsets.txn_marker(t, r, ctx)
        elif kind == "fetch":
            out = Outcome(response=offsets.fetch(t, r))
        elif kind == "list":
            out = Outcome(response=pb.ListGroupsResponse(groups=offsets.list_groups(t, list(r))))
        elif kind == "describe":
            group_id, ends = r
            out = Outcome(response=offsets.describe(t.get(group_id), group_id, ends))
        elif kind == "delete":
            result, out = offsets.delete(t, r, ctx)
            out.response = result
        elif kind == "tps":
            out = Outcome(response=self._tps_of(r))
        elif kind == "rebalance":  # partition count of a subscribed topic changed
            out = membership.trigger_rebalance(t, r, ctx)
        elif kind == "snapshot":
            out = Outcome(response=self._snapshot())
        else:
            raise ValueError(f"unknown request kind {kind!r}")
        await self._commit(out, req)

    async def _commit(self, out: Outcome, req: Request | None = None) -> None:
        await super()._commit(out, req)
        for group_id, duration_ms in out.rebalances:
            if self._on_rebalance is not None:
                self._on_rebalance(group_id, duration_ms)

    def _tps_of(self, group_id: str) -> list[tuple[str, int]]:
        g = self._table.get(group_id)
        if g is None:
            return []
        tps = set(g.offsets)
        for m in g.members.values():
            for tp in offsets.assignment_of(m.assignment):
                tps.update((tp.topic, p) for p in tp.partitions)
        return sorted(tps)

    def _snapshot(self) -> list[GroupSnapshot]:
        return [
            GroupSnapshot(
                gid,
                len(g.members),
                {tp: o.offset for tp, o in g.offsets.items()},
                g.state.value,
                offsets.subscribed_topics(
                    g.protocol_type, (meta for m in g.members.values() for _, meta in m.protocols)
                ),
                g.generation,
                offsets.assigned_counts(m.assignment for m in g.members.values()),
            )
            for gid, g in sorted(self._table.groups.items())
        ]
