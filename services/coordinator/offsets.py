"""OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, expiry: pure handlers.

Commit fencing (the acceptance's "committed offsets never move backwards", read as: a stale
generation can never overwrite a newer one): a commit with ``generation_id >= 0`` or a member
id must come from a current member of the current generation — otherwise UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID or ILLEGAL_GENERATION, and REBALANCE_IN_PROGRESS while the group is
CompletingRebalance (Kafka's rule; commits during PreparingRebalance with the current
generation are accepted so eager members can commit before they rejoin). A commit with
generation -1 and an empty member id (admin reset, simple consumer) is accepted only while
the group has no members (UNKNOWN_MEMBER_ID "group has active members" otherwise). A current
member may move its own offsets backwards (seek + commit), as in Kafka.

Retention: offsets of an Empty group whose commit timestamp is older than
``ctx.offsets_retention_ms`` are tombstoned by :func:`expire`; an Empty group with no offsets
left is tombstoned too (then Dead).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import records as rec
from services.coordinator.group import Group, GroupState, GroupTable
from services.coordinator.membership import valid_group_id
from services.coordinator.outcome import Ctx, Outcome

MAX_METADATA_BYTES = 4096


def commit(table: GroupTable, req: pb.OffsetCommitRequest, ctx: Ctx) -> Outcome:
    def whole(code: int, msg: str) -> Outcome:
        return Outcome(response=pb.OffsetCommitResponse(error_code=code, error_message=msg))  # type: ignore[arg-type]

    if not valid_group_id(req.group_id):
        return whole(ErrorCode.INVALID_GROUP_ID, f"invalid group id {req.group_id!r}")
    g = table.get(req.group_id)
    if req.generation_id < 0 and not req.member_id:
        if g is not None and g.members:
            return whole(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"group {req.group_id!r} has active members; a commit from outside the group "
                "protocol is accepted only while it has none",
            )
    else:
        code, msg = _check(g, req)
        if code != ErrorCode.NONE:
            return whole(code, msg)
        assert g is not None
        g.members[req.member_id].last_seen_ms = ctx.now_ms
    out = Outcome()
    resp = pb.OffsetCommitResponse()
    for p in req.partitions:
        code, msg = ErrorCode.NONE, ""
        if not p.topic or "\x00" in p.topic or p.partition < 0:
            code, msg = ErrorCode.INVALID_REQUEST, "bad topic or partition"
        elif p.offset < 0:
            code, msg = ErrorCode.INVALID_REQUEST, f"offset {p.offset} < 0"
        elif len(p.metadata.encode()) > MAX_METADATA_BYTES:
            code, msg = ErrorCode.OFFSET_METADATA_TOO_LARGE, "metadata over 4096 bytes"
        else:
            o = rec.Offset(p.offset, p.leader_epoch, p.metadata, ctx.now_ms)
            committed = rec.OffsetCommit(req.group_id, p.topic, p.partition, o)
            out.records.append(rec.Record(committed, ctx.epoch))
        resp.partitions.append(
            pb.OffsetCommitPartitionResult(
                topic=p.topic,
                partition=p.partition,
                error_code=code,
                error_message=msg,
            )
        )
    out.response = resp
    return out


def _check(g: Group | None, req: pb.OffsetCommitRequest) -> tuple[int, str]:
    if g is None:
        return (
            ErrorCode.UNKNOWN_MEMBER_ID,
            f"group {req.group_id!r} has no member {req.member_id!r}",
        )
    if req.group_instance_id:
        owner = g.instance_member(req.group_instance_id)
        if owner is not None and owner.member_id != req.member_id:
            return ErrorCode.FENCED_INSTANCE_ID, "instance was taken over"
    m = g.members.get(req.member_id)
    if m is None:
        return ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {req.member_id!r}"
    if req.generation_id != g.generation:
        return (
            ErrorCode.ILLEGAL_GENERATION,
            f"generation {req.generation_id} is not the current {g.generation}",
        )
    if g.state is GroupState.COMPLETING_REBALANCE:
        return ErrorCode.REBALANCE_IN_PROGRESS, "rebalance in progress"
    return ErrorCode.NONE, ""


def fetch(table: GroupTable, req: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
    g = table.get(req.group_id)
    offsets = g.offsets if g is not None else {}
    resp = pb.OffsetFetchResponse()
    if req.partitions:
        wanted = [(tp.topic, p) for tp in req.partitions for p in tp.partitions]
    else:
        wanted = sorted(offsets)
    unstable = (
        {(t, p) for t, p, _pid in g.pending} if g is not None and req.require_stable else set()
    )
    for topic, p in wanted:
        o = offsets.get((topic, p))
        if (topic, p) in unstable:
            resp.offsets.append(
                pb.CommittedOffset(
                    topic=topic,
                    partition=p,
                    offset=-1,
                    leader_epoch=-1,
                    error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT,
                )
            )
        elif o is None:
            resp.offsets.append(
                pb.CommittedOffset(topic=topic, partition=p, offset=-1, leader_epoch=-1)
            )
        else:
            resp.offsets.append(
                pb.CommittedOffset(
                    topic=topic,
                    partition=p,
                    offset=o.offset,
                    leader_epoch=o.leader_epoch,
                    metadata=o.metadata,
                )
            )
    return resp


def assignment_of(raw: bytes) -> list[pb.TopicPartitions]:
    try:
        a = pb.ConsumerAssignment.FromString(raw)
    except Exception:  # opaque client bytes: not decodable = nothing
        return []
    return list(a.partitions)


def subscribed_topics(protocol_type: str, metadatas: Iterable[bytes]) -> frozenset[str]:
    """Union of the topics in members' ``ConsumerSubscription`` metadata (consumer groups
    only; undecodable metadata contributes nothing)."""
    if protocol_type != "consumer":
        return frozenset()
    out: set[str] = set()
    for raw in metadatas:
        try:
            out.update(pb.ConsumerSubscription.FromString(raw).topics)
        except Exception:  # opaque client bytes
            continue
    return frozenset(out)


def assigned_counts(assignments: Iterable[bytes]) -> dict[str, int]:
    """Per topic, 1 + the highest partition in the members' ``ConsumerAssignment`` bytes: the
    partition count the leader assigned from (topics with nothing assigned are absent)."""
    out: dict[str, int] = {}
    for raw in assignments:
        for tp in assignment_of(raw):
            if tp.partitions:
                out[tp.topic] = max(out.get(tp.topic, 0), max(tp.partitions) + 1)
    return out


def describe(
    g: Group | None, group_id: str, ends: Mapping[tuple[str, int], tuple[int, int]]
) -> pb.DescribedGroup:
    """``ends``: (topic, partition) -> (log start, high watermark) as last measured."""
    if g is None:
        return pb.DescribedGroup(group_id=group_id, state=GroupState.DEAD.value)
    d = pb.DescribedGroup(
        group_id=group_id,
        state=g.state.value,
        protocol_type=g.protocol_type,
        protocol_name=g.protocol,
        generation_id=g.generation,
        leader=g.leader,
    )
    owner: dict[tuple[str, int], str] = {}
    for m in g.members.values():
        tps = assignment_of(m.assignment)
        d.members.append(
            pb.DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                assignment=tps,
            )
        )
        for tp in tps:
            for p in tp.partitions:
                owner[(tp.topic, p)] = m.member_id
    for topic, p in sorted(set(owner) | set(g.offsets)):
        o = g.offsets.get((topic, p))
        committed = o.offset if o is not None else -1
        start, end = ends.get((topic, p), (-1, -1))
        lag = -1 if end < 0 else max(0, end - (committed if committed >= 0 else max(start, 0)))
        d.partitions.append(
            pb.PartitionLag(
                topic=topic,
                partition=p,
                committed=committed,
                end=end,
                lag=lag,
                member_id=owner.get((topic, p), ""),
            )
        )
    d.total_lag = sum(pl.lag for pl in d.partitions if pl.lag > 0)
    return d


def list_groups(table: GroupTable, states: list[str]) -> list[pb.ListedGroup]:
    return [
        pb.ListedGroup(group_id=gid, state=g.state.value, protocol_type=g.protocol_type)
        for gid, g in sorted(table.groups.items())
        if g.state is not GroupState.DEAD and (not states or g.state.value in states)
    ]


def delete(table: GroupTable, group_id: str, ctx: Ctx) -> tuple[pb.DeleteGroupsResult, Outcome]:
    out = Outcome()
    g = table.get(group_id)
    if g is None or (not g.has_metadata and not g.offsets and not g.members):
        return pb.DeleteGroupsResult(
            group_id=group_id,
            error_code=ErrorCode.GROUP_ID_NOT_FOUND,
            error_message="no such group",
        ), out
    if g.members or g.state is not GroupState.EMPTY:
        return pb.DeleteGroupsResult(
            group_id=group_id,
            error_code=ErrorCode.NON_EMPTY_GROUP,
            error_message="group has members",
        ), out
    out.records.extend(_tombstones(g, list(g.offsets), ctx))
    out.records.append(rec.Record(rec.GroupMetadata(group_id, None), ctx.epoch))
    return pb.DeleteGroupsResult(group_id=group_id), out


def _tombstones(g: Group, tps: list[tuple[str, int]], ctx: Ctx) -> list[rec.Record]:
    return [rec.Record(rec.OffsetCommit(g.group_id, t, p, None), ctx.epoch) for t, p in tps]


def expire(table: GroupTable, ctx: Ctx) -> Outcome:
    """Tombstones for expired offsets of Empty groups, and for Empty groups left with none."""
    out = Outcome()
    for g in list(table.groups.values()):
        if g.state is not GroupState.EMPTY or g.members:
            continue
        old = [
            tp
            for tp, o in g.offsets.items()
            if o.commit_timestamp + ctx.offsets_retention_ms <= ctx.now_ms
        ]
        out.records.extend(_tombstones(g, old, ctx))
        if len(old) == len(g.offsets):
            if g.has_metadata:
                out.records.append(rec.Record(rec.GroupMetadata(g.group_id, None), ctx.epoch))
            elif not g.offsets:
                table.groups.pop(g.group_id, None)  # volatile only (pending ids): forget it
    return out
