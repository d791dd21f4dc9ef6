"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup and timers: pure handlers over a GroupTable.

Each handler returns an :class:`~services.coordinator.outcome.Outcome`; durable changes are
records only (a group-metadata record per generation change / assignment / static-member id
replacement), applied later by ``GroupTable.apply``. Volatile changes (rebalance start,
members joining before their generation, heartbeats) are made directly on the table.

Rules (Kafka's classic protocol):

* a dynamic member's first JoinGroup (empty member id) gets MEMBER_ID_REQUIRED with a new id;
  it rejoins with it;
* a join starts (or joins) a rebalance; the rebalance completes when every member rejoined or
  at the deadline (max rebalance timeout of the members), members that did not rejoin are
  removed; generation + 1, protocol chosen by vote among those every member supports, leader =
  the previous leader if it rejoined, else the first member to join;
* the leader's SyncGroup stores the assignments (one record) and answers every parked member;
* static members (group.instance.id): rejoining with an empty member id replaces the old
  member id (the old one is fenced: FENCED_INSTANCE_ID); in a Stable group with unchanged
  protocols this happens without a rebalance and the member keeps its assignment
  (``skip_assignment`` for a leader);
* Heartbeat: UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / ILLEGAL_GENERATION fencing,
  REBALANCE_IN_PROGRESS while PreparingRebalance;
* ``tick``: session expiry (members not parked in a join or sync), rebalance deadline.
"""

from __future__ import annotations

from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator.group import Group, GroupState, GroupTable, Member
from services.coordinator.outcome import Ctx, Outcome, Wait, WaitKey

MIN_SESSION_TIMEOUT_MS = 100
MAX_SESSION_TIMEOUT_MS = 1_800_000
#: The session timeout of a JoinGroup that leaves ``session_timeout_ms`` 0 (Kafka's default).
DEFAULT_SESSION_TIMEOUT_MS = 45_000


def valid_group_id(group_id: str) -> bool:
    return bool(group_id) and "\x00" not in group_id and len(group_id) <= 249 * 4


def _join_error(code: int, msg: str, member_id: str = "") -> Outcome:
    return Outcome(
        response=pb.JoinGroupResponse(error_code=code, error_message=msg, member_id=member_id)  # type: ignore[arg-type]
    )


def _protocols(req: pb.JoinGroupRequest) -> list[tuple[str, bytes]]:
    return [(p.name, bytes(p.metadata)) for p in req.protocols]


def _compatible(g: Group, req: pb.JoinGroupRequest) -> bool:
    if not g.members:
        return True
    if g.protocol_type and req.protocol_type != g.protocol_type:
        return False
    names = {p.name for p in req.protocols}
    return bool(names & _candidates(list(g.members.values())))


def _candidates(members: list[Member]) -> set[str]:
    sets = [{n for n, _ in m.protocols} for m in members]
    return set.intersection(*sets) if sets else set()


def choose_protocol(members: list[Member]) -> str:
    """Each member votes for its most preferred protocol that all members support."""
    cands = _candidates(members)
    if not cands:
        return ""
    votes: dict[str, int] = {}
    for m in members:
        for name, _ in m.protocols:
            if name in cands:
                votes[name] = votes.get(name, 0) + 1
                break
    order = [n for n, _ in members[0].protocols if n in cands]
    return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)))


def join(table: GroupTable, req: pb.JoinGroupRequest, ctx: Ctx) -> Outcome:
    if req.session_timeout_ms == 0:  # unset: the default (a copy: the caller's stays as sent)
        given = req
        req = pb.JoinGroupRequest()
        req.CopyFrom(given)
        req.session_timeout_ms = DEFAULT_SESSION_TIMEOUT_MS
    if not valid_group_id(req.group_id):
        return _join_error(ErrorCode.INVALID_GROUP_ID, f"invalid group id {req.group_id!r}")
    if not MIN_SESSION_TIMEOUT_MS <= req.session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
        return _join_error(
            ErrorCode.INVALID_SESSION_TIMEOUT,
            f"session_timeout_ms must be in [{MIN_SESSION_TIMEOUT_MS}, {MAX_SESSION_TIMEOUT_MS}]",
        )
    if not req.protocol_type or not req.protocols:
        return _join_error(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "protocol_type and protocols are required"
        )
    g = table.get(req.group_id)
    if g is None:
        g = table.groups[req.group_id] = Group(req.group_id)
    if not _compatible(g, req):
        return _join_error(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
            "protocol type or protocols incompatible with the group's members",
            req.member_id,
        )
    if not g.members:
        g.protocol_type = req.protocol_type
    out = Outcome()
    rebalance_timeout = (
        req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms
    )
    if not req.member_id:
        old = g.instance_member(req.group_instance_id)
        if not req.group_instance_id:
            new_id = ctx.new_member_id(req.client_id)
            g.pending_ids.add(new_id)
            return _join_error(ErrorCode.MEMBER_ID_REQUIRED, "rejoin with this member id", new_id)
        new = Member(
            ctx.new_member_id(req.client_id),
            req.group_instance_id,
            req.client_id,
            req.session_timeout_ms,
            rebalance_timeout,
            _protocols(req),
            assignment=old.assignment if old is not None else b"",
            last_seen_ms=ctx.now_ms,
        )
        if old is not None:
            _fence(g, old.member_id, out)
            # As Kafka: no rebalance unless the protocol choice could change. The metadata
            # may differ (a restarted consumer no longer reports its owned partitions).
            same_names = [n for n, _ in old.protocols] == [n for n, _ in new.protocols]
            if g.state is GroupState.STABLE and same_names:
                return _replace_static(g, old, new, ctx, out)
            del g.members[old.member_id]
            if g.leader == old.member_id:
                g.leader = new.member_id
        g.members[new.member_id] = new
        return _rejoined(g, new, ctx, out)
    m = g.members.get(req.member_id)
    if m is None:
        if req.member_id in g.pending_ids and not req.group_instance_id:
            g.pending_ids.discard(req.member_id)
            m = Member(
                req.member_id,
                "",
                req.client_id,
                req.session_timeout_ms,
                rebalance_timeout,
                _protocols(req),
                last_seen_ms=ctx.now_ms,
            )
            g.members[m.member_id] = m
            return _rejoined(g, m, ctx, out)
        if g.instance_member(req.group_instance_id) is not None:
            return _join_error(
                ErrorCode.FENCED_INSTANCE_ID,
                f"instance {req.group_instance_id!r} is owned by another member",
                req.member_id,
            )
        return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, "unknown member id", req.member_id)
    if m.instance_id != req.group_instance_id:
        return _join_error(ErrorCode.FENCED_INSTANCE_ID, "instance id mismatch", req.member_id)
    changed = m.protocols != _protocols(req)
    m.protocols = _protocols(req)
    m.session_timeout_ms = req.session_timeout_ms
    m.rebalance_timeout_ms = rebalance_timeout
    m.last_seen_ms = ctx.now_ms
    if g.state is GroupState.STABLE and not changed and m.member_id != g.leader:
        out.response = _join_response(g, m.member_id, g.generation, g.protocol, g.leader)
        return out
    if g.state is GroupState.COMPLETING_REBALANCE and not changed:
        out.response = _join_response(g, m.member_id, g.generation, g.protocol, g.leader)
        return out
    return _rejoined(g, m, ctx, out)


def _replace_static(g: Group, old: Member, new: Member, ctx: Ctx, out: Outcome) -> Outcome:
    """A static member restarted: new member id, same assignment, no rebalance."""
    leader = new.member_id if g.leader == old.member_id else g.leader
    members = [new if mm.member_id == old.member_id else mm for mm in g.members.values()]
    out.records.append(
        g.metadata_record(
            ctx.epoch,
            generation=g.generation,
            protocol=g.protocol,
            leader=leader,
            members=members,
            assigned=True,
        )
    )
    resp = pb.JoinGroupResponse(
        generation_id=g.generation,
        protocol_name=g.protocol,
        leader=leader,
        member_id=new.member_id,
        skip_assignment=leader == new.member_id,
    )
    if leader == new.member_id:
        resp.members.extend(_member_list(members, g.protocol))
    out.response = resp
    return out


def _fence(g: Group, member_id: str, out: Outcome) -> None:
    _fail_parked(g, member_id, out, ErrorCode.FENCED_INSTANCE_ID, "fenced by a newer instance")


def _fail_parked(g: Group, member_id: str, out: Outcome, code: int, msg: str) -> None:
    """Answer a member's parked JoinGroup and SyncGroup (if any) with an error."""
    for wait in (Wait.JOIN, Wait.SYNC):
        out.replies.append((WaitKey(wait, g.group_id, member_id), _error_for(wait, code, msg)))


def _error_for(wait: Wait, code: int, msg: str) -> object:
    if wait is Wait.JOIN:
        return pb.JoinGroupResponse(error_code=code, error_message=msg)  # type: ignore[arg-type]
    return pb.SyncGroupResponse(error_code=code, error_message=msg)  # type: ignore[arg-type]


def _rejoined(g: Group, m: Member, ctx: Ctx, out: Outcome) -> Outcome:
    """``m`` joins the (possibly new) rebalance; park its JoinGroup."""
    prepare_rebalance(g, ctx, out)
    m.rejoined = True
    g.rebalance_deadline_ms = max(g.rebalance_deadline_ms, ctx.now_ms + m.rebalance_timeout_ms)
    out.wait = WaitKey(Wait.JOIN, g.group_id, m.member_id)
    maybe_complete_join(g, ctx, out)
    return out


def prepare_rebalance(g: Group, ctx: Ctx, out: Outcome) -> None:
    if g.state is GroupState.PREPARING_REBALANCE:
        return
    if g.state is GroupState.COMPLETING_REBALANCE:
        for mid in g.members:  # parked syncs of the aborted generation must rejoin
            out.replies.append(
                (
                    WaitKey(Wait.SYNC, g.group_id, mid),
                    _error_for(Wait.SYNC, ErrorCode.REBALANCE_IN_PROGRESS, "rejoin the group"),
                )
            )
    g.state = GroupState.PREPARING_REBALANCE
    g.rebalance_started_ms = ctx.now_ms
    g.rebalance_deadline_ms = ctx.now_ms + max(
        (m.rebalance_timeout_ms for m in g.members.values()), default=0
    )
    for m in g.members.values():
        m.rejoined = False


def maybe_complete_join(g: Group, ctx: Ctx, out: Outcome) -> None:
    if g.state is GroupState.PREPARING_REBALANCE and all(m.rejoined for m in g.members.values()):
        complete_join(g, ctx, out)


def complete_join(g: Group, ctx: Ctx, out: Outcome) -> None:
    """End the join phase: drop members that did not rejoin, write the new generation."""
    for mid in [mid for mid, m in g.members.items() if not m.rejoined]:
        _remove(g, mid, out, "did not rejoin before the rebalance timeout")
    members = list(g.members.values())
    protocol = choose_protocol(members)
    leader = g.leader if g.leader in g.members else (members[0].member_id if members else "")
    generation = g.generation + 1
    for m in members:
        m.assignment = b""
    out.records.append(
        g.metadata_record(
            ctx.epoch,
            generation=generation,
            protocol=protocol,
            leader=leader,
            members=members,
            assigned=False,
        )
    )
    out.rebalances.append((g.group_id, ctx.now_ms - g.rebalance_started_ms))
    for m in members:
        resp = _join_response_raw(members, m.member_id, generation, protocol, leader)
        out.replies.append((WaitKey(Wait.JOIN, g.group_id, m.member_id), resp))


def _member_list(members: list[Member], protocol: str) -> list[pb.JoinGroupMember]:
    return [
        pb.JoinGroupMember(
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            metadata=m.metadata_for(protocol),
        )
        for m in members
    ]


def _join_response_raw(
    members: list[Member], member_id: str, generation: int, protocol: str, leader: str
) -> pb.JoinGroupResponse:
    resp = pb.JoinGroupResponse(
        generation_id=generation, protocol_name=protocol, leader=leader, member_id=member_id
    )
    if member_id == leader:
        resp.members.extend(_member_list(members, protocol))
    return resp


def _join_response(
    g: Group, member_id: str, generation: int, protocol: str, leader: str
) -> pb.JoinGroupResponse:
    return _join_response_raw(list(g.members.values()), member_id, generation, protocol, leader)


def _remove(g: Group, member_id: str, out: Outcome, why: str) -> None:
    g.members.pop(member_id, None)
    _fail_parked(g, member_id, out, ErrorCode.UNKNOWN_MEMBER_ID, why)


def remove_members(g: Group, member_ids: list[str], ctx: Ctx, out: Outcome, why: str) -> None:
    """Remove members (leave, session expiry); rebalance the rest or go Empty."""
    for mid in member_ids:
        _remove(g, mid, out, why)
    if not g.members:
        if g.state is not GroupState.EMPTY:
            if g.state is not GroupState.PREPARING_REBALANCE:
                g.rebalance_started_ms = ctx.now_ms
            g.state = GroupState.PREPARING_REBALANCE
            complete_join(g, ctx, out)
        return
    prepare_rebalance(g, ctx, out)
    maybe_complete_join(g, ctx, out)


def _check_member(
    g: Group | None, member_id: str, instance_id: str, generation: int
) -> tuple[int, str]:
    if g is None:
        return ErrorCode.UNKNOWN_MEMBER_ID, "unknown group"
    if instance_id:
        owner = g.instance_member(instance_id)
        if owner is not None and owner.member_id != member_id:
            return ErrorCode.FENCED_INSTANCE_ID, f"instance {instance_id!r} was taken over"
    m = g.members.get(member_id)
    if m is None:
        return ErrorCode.UNKNOWN_MEMBER_ID, f"unknown member {member_id!r}"
    if m.instance_id != instance_id:
        return ErrorCode.FENCED_INSTANCE_ID, "instance id mismatch"
    if generation != g.generation:
        return ErrorCode.ILLEGAL_GENERATION, f"generation {generation} != {g.generation}"
    return ErrorCode.NONE, ""


def sync(table: GroupTable, req: pb.SyncGroupRequest, ctx: Ctx) -> Outcome:
    g = table.get(req.group_id)
    code, msg = _check_member(g, req.member_id, req.group_instance_id, req.generation_id)
    if code != ErrorCode.NONE:
        return Outcome(response=pb.SyncGroupResponse(error_code=code, error_message=msg))  # type: ignore[arg-type]
    assert g is not None
    m = g.members[req.member_id]
    m.last_seen_ms = ctx.now_ms
    if g.state is GroupState.PREPARING_REBALANCE:
        return Outcome(
            response=pb.SyncGroupResponse(
                error_code=ErrorCode.REBALANCE_IN_PROGRESS, error_message="rejoin the group"
            )
        )
    if g.state is GroupState.STABLE:
        return Outcome(response=pb.SyncGroupResponse(assignment=m.assignment))
    out = Outcome(wait=WaitKey(Wait.SYNC, g.group_id, m.member_id))
    if m.member_id != g.leader:
        return out
    given = {a.member_id: bytes(a.assignment) for a in req.assignments}
    unknown = set(given) - set(g.members)
    if unknown:
        return Outcome(
            response=pb.SyncGroupResponse(
                error_code=ErrorCode.UNKNOWN_MEMBER_ID,
                error_message=f"assignment for unknown members {sorted(unknown)}",
            )
        )
    members = list(g.members.values())
    for mm in members:
        mm.assignment = given.get(mm.member_id, b"")
    out.records.append(
        g.metadata_record(
            ctx.epoch,
            generation=g.generation,
            protocol=g.protocol,
            leader=g.leader,
            members=members,
            assigned=True,
        )
    )
    for mm in members:
        out.replies.append(
            (
                WaitKey(Wait.SYNC, g.group_id, mm.member_id),
                pb.SyncGroupResponse(assignment=mm.assignment),
            )
        )
    return out


def heartbeat(table: GroupTable, req: pb.HeartbeatRequest, ctx: Ctx) -> Outcome:
    g = table.get(req.group_id)
    code, msg = _check_member(g, req.member_id, req.group_instance_id, req.generation_id)
    if code == ErrorCode.NONE:
        assert g is not None
        g.members[req.member_id].last_seen_ms = ctx.now_ms
        if g.state is GroupState.PREPARING_REBALANCE:
            code, msg = ErrorCode.REBALANCE_IN_PROGRESS, "rejoin the group"
    return Outcome(response=pb.HeartbeatResponse(error_code=code, error_message=msg))  # type: ignore[arg-type]


def leave(table: GroupTable, req: pb.LeaveGroupRequest, ctx: Ctx) -> Outcome:
    g = table.get(req.group_id)
    out = Outcome()
    resp = pb.LeaveGroupResponse()
    gone: list[str] = []
    for ident in req.members:
        code = ErrorCode.NONE
        mid = ident.member_id
        if g is None:
            code = ErrorCode.UNKNOWN_MEMBER_ID
        elif ident.group_instance_id:
            owner = g.instance_member(ident.group_instance_id)
            if owner is None:
                code = ErrorCode.UNKNOWN_MEMBER_ID
            elif mid and owner.member_id != mid:
                code = ErrorCode.FENCED_INSTANCE_ID
            else:
                mid = owner.member_id
        elif mid not in g.members:
            code = ErrorCode.UNKNOWN_MEMBER_ID
        if code == ErrorCode.NONE:
            gone.append(mid)
        resp.members.append(
            pb.MemberResult(
                member_id=mid, group_instance_id=ident.group_instance_id, error_code=code
            )
        )
    if g is not None and gone:
        remove_members(g, gone, ctx, out, "left the group")
    out.response = resp
    return out


def trigger_rebalance(table: GroupTable, group_id: str, ctx: Ctx) -> Outcome:
    """Start a rebalance of a Stable/CompletingRebalance group (partition count changed)."""
    out = Outcome()
    g = table.get(group_id)
    if g is not None and g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        prepare_rebalance(g, ctx, out)
    return out


def tick(table: GroupTable, ctx: Ctx, parked: set[WaitKey]) -> Outcome:
    """Session expiry and rebalance deadlines. ``parked``: keys of requests parked now (a
    member parked in a JoinGroup or SyncGroup is alive)."""
    out = Outcome()
    for g in list(table.groups.values()):
        expired = [
            mid
            for mid, m in g.members.items()
            if ctx.now_ms - m.last_seen_ms > m.session_timeout_ms
            and WaitKey(Wait.JOIN, g.group_id, mid) not in parked
            and WaitKey(Wait.SYNC, g.group_id, mid) not in parked
        ]
        if expired:
            remove_members(g, expired, ctx, out, "session timed out")
        if g.state is GroupState.PREPARING_REBALANCE and ctx.now_ms >= g.rebalance_deadline_ms:
            if g.members or g.has_metadata:
                complete_join(g, ctx, out)
            else:
                g.state = GroupState.EMPTY
    return out
