"""The group coordinator's requests and their handlers, registered by type (handlers.py).

Client requests are the RPCs' protobuf messages (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, TxnOffsetCommit, WriteTxnOffsetMarker, OffsetFetch, ListGroups); the servicer's
per-group steps and the other tasks' internal requests are the frozen dataclasses below. Every
handler is pure, ``(GroupTable, request, Ctx) -> Outcome`` (outcome.py): the partition
runtime (runtime.py) appends the outcome's records and answers once they are applied.

``not_coordinator(request)`` is the in-band NOT_COORDINATOR answer of a client request (the
servicer's when it does not own the group's partition, the runtime's when it stops); for an
internal request it raises :class:`~services.coordinator.handlers.PartitionLostError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import membership, offsets, txn_offsets
from services.coordinator.group import GroupTable
from services.coordinator.handlers import Registry, whole
from services.coordinator.outcome import Ctx, Outcome

# ------------------------------------------------------------------ the requests


@dataclass(frozen=True)
class DescribeGroup:
    """DescribeGroups for one group, with its partitions' (log start, high watermark)."""

    group_id: str
    ends: Mapping[tuple[str, int], tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class DeleteGroup:
    """DeleteGroups for one group: answered with a ``DeleteGroupsResult``."""

    group_id: str


@dataclass(frozen=True)
class GroupPartitions:
    """Internal: the (topic, partition)s a group commits or is assigned (to measure lag)."""

    group_id: str


@dataclass(frozen=True)
class TriggerRebalance:
    """Internal: a subscribed topic's partition count changed (topic_watch.py)."""

    group_id: str


@dataclass(frozen=True)
class SnapshotGroups:
    """Internal: a :class:`GroupSnapshot` of every group (metrics, topic watch)."""


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


# ------------------------------------------------------------------ handlers of reads


def _fetch(t: GroupTable, r: pb.OffsetFetchRequest, ctx: Ctx) -> Outcome:
    return Outcome(response=offsets.fetch(t, r))


def _list(t: GroupTable, r: pb.ListGroupsRequest, ctx: Ctx) -> Outcome:
    return Outcome(response=pb.ListGroupsResponse(groups=offsets.list_groups(t, list(r.states))))


def _describe(t: GroupTable, r: DescribeGroup, ctx: Ctx) -> Outcome:
    return Outcome(response=offsets.describe(t.get(r.group_id), r.group_id, r.ends))


def _delete(t: GroupTable, r: DeleteGroup, ctx: Ctx) -> Outcome:
    result, out = offsets.delete(t, r.group_id, ctx)
    out.response = result
    return out


def _partitions(t: GroupTable, r: GroupPartitions, ctx: Ctx) -> Outcome:
    g = t.get(r.group_id)
    if g is None:
        return Outcome(response=[])
    tps = set(g.offsets)
    for m in g.members.values():
        for tp in offsets.assignment_of(m.assignment):
            tps.update((tp.topic, p) for p in tp.partitions)
    return Outcome(response=sorted(tps))


def _rebalance(t: GroupTable, r: TriggerRebalance, ctx: Ctx) -> Outcome:
    return membership.trigger_rebalance(t, r.group_id, ctx)


def _snapshot(t: GroupTable, r: SnapshotGroups, ctx: Ctx) -> Outcome:
    return Outcome(
        response=[
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
            for gid, g in sorted(t.groups.items())
        ]
    )


# ------------------------------------------------------------------ the registry

HANDLERS: Registry[GroupTable, Ctx, Outcome] = Registry("group coordinator")
HANDLERS.add(pb.JoinGroupRequest, membership.join, whole(pb.JoinGroupResponse))
HANDLERS.add(pb.SyncGroupRequest, membership.sync, whole(pb.SyncGroupResponse))
HANDLERS.add(pb.HeartbeatRequest, membership.heartbeat, whole(pb.HeartbeatResponse))
HANDLERS.add(pb.LeaveGroupRequest, membership.leave, whole(pb.LeaveGroupResponse))
HANDLERS.add(pb.OffsetCommitRequest, offsets.commit, whole(pb.OffsetCommitResponse))
HANDLERS.add(pb.TxnOffsetCommitRequest, txn_offsets.txn_commit, whole(pb.OffsetCommitResponse))
HANDLERS.add(
    pb.WriteTxnOffsetMarkerRequest,
    txn_offsets.txn_marker,
    whole(pb.WriteTxnOffsetMarkerResponse),
)
HANDLERS.add(pb.OffsetFetchRequest, _fetch, whole(pb.OffsetFetchResponse))
HANDLERS.add(
    pb.ListGroupsRequest,
    _list,
    lambda _r, code, _m: pb.ListGroupsResponse(error_code=code),  # type: ignore[arg-type]
)
HANDLERS.add(
    DescribeGroup,
    _describe,
    lambda r, code, _m: pb.DescribedGroup(group_id=r.group_id, error_code=code),  # type: ignore[arg-type]
)
HANDLERS.add(
    DeleteGroup,
    _delete,
    lambda r, code, msg: pb.DeleteGroupsResult(
        group_id=r.group_id,
        error_code=code,  # type: ignore[arg-type]
        error_message=msg,
    ),
)
HANDLERS.add(GroupPartitions, _partitions)
HANDLERS.add(TriggerRebalance, _rebalance)
HANDLERS.add(SnapshotGroups, _snapshot)


def not_coordinator(request: object, msg: str = "not the coordinator") -> Any:
    """The in-band NOT_COORDINATOR answer to ``request`` (raises PartitionLostError for an
    internal request)."""
    return HANDLERS.error(request, ErrorCode.NOT_COORDINATOR, msg)
