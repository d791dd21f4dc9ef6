"""The group state machine and offset handlers with a fake clock and an in-memory log."""

from __future__ import annotations

import pytest

from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import membership
from services.coordinator import records as rec
from services.coordinator.group import GroupState, GroupTable
from services.coordinator.outcome import Wait, WaitKey
from tests.coordinator.harness import PARKED, Harness

pytestmark = pytest.mark.fast

G = "g1"


def stable_pair(h: Harness) -> tuple[str, str, int]:
    """Two dynamic members in a Stable group; returns (leader, follower, generation)."""
    a = h.join_dynamic(G)
    ra = h.join(G, a)
    assert ra.error_code == 0 and ra.generation_id == 1 and ra.leader == a
    assert h.sync(G, a, 1, {a: b"A"}).assignment == b"A"
    b = h.join_dynamic(G)
    assert h.join(G, b) is PARKED
    assert h.table.groups[G].state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(G, a, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    ra = h.join(G, a)
    assert ra.generation_id == 2 and ra.leader == a
    assert {m.member_id for m in ra.members} == {a, b}
    rb = h.take(WaitKey(Wait.JOIN, G, b))
    assert rb.generation_id == 2 and rb.leader == a and not rb.members
    assert h.table.groups[G].state is GroupState.COMPLETING_REBALANCE
    assert h.sync(G, b, 2) is PARKED
    ra_sync = h.sync(G, a, 2, {a: b"A2", b: b"B2"})
    assert ra_sync.assignment == b"A2"
    assert h.take(WaitKey(Wait.SYNC, G, b)).assignment == b"B2"
    assert h.table.groups[G].state is GroupState.STABLE
    return a, b, 2


def test_join_sync_and_heartbeat_fencing() -> None:
    h = Harness()
    a, _b, gen = stable_pair(h)
    assert h.heartbeat(G, a, gen) == ErrorCode.NONE
    assert h.heartbeat(G, a, gen - 1) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat(G, "nobody", gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("other", a, gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.join(G, "made-up").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert len(h.rebalances) == 2


def test_unset_session_timeout_is_the_default_and_a_negative_one_is_refused() -> None:
    h = Harness()
    assert h.join(G, session_ms=-1).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    a = h.join_dynamic(G, session_ms=0)
    h.join(G, a, session_ms=0)
    member = h.table.groups[G].members[a]
    assert member.session_timeout_ms == membership.DEFAULT_SESSION_TIMEOUT_MS
    assert member.rebalance_timeout_ms == 30_000  # the harness's, given explicitly


def test_session_expiry_removes_member_and_rebalances() -> None:
    h = Harness()
    a, b, gen = stable_pair(h)
    h.now += 6_000
    assert h.heartbeat(G, a, gen) == ErrorCode.NONE  # a stays alive, b goes silent
    h.now += 5_000
    h.tick()
    g = h.table.groups[G]
    assert b not in g.members and g.state is GroupState.PREPARING_REBALANCE
    r = h.join(G, a)
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]
    assert h.heartbeat(G, b, gen) == ErrorCode.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_drops_members_that_did_not_rejoin() -> None:
    h = Harness()
    a, _b, gen = stable_pair(h)
    c = h.join_dynamic(G, rebalance_ms=5_000)
    assert h.join(G, c, rebalance_ms=5_000) is PARKED
    assert h.join(G, a) is PARKED
    h.now += 31_000
    h.tick()
    rc = h.take(WaitKey(Wait.JOIN, G, c))
    assert rc.generation_id == gen + 1
    assert set(h.table.groups[G].members) == {a, c}


def test_leave_rebalances_then_empty() -> None:
    h = Harness()
    a, b, gen = stable_pair(h)
    assert h.leave(G, b).members[0].error_code == ErrorCode.NONE
    assert h.table.groups[G].state is GroupState.PREPARING_REBALANCE
    assert h.join(G, a).generation_id == gen + 1
    h.leave(G, a)
    g = h.table.groups[G]
    assert g.state is GroupState.EMPTY and not g.members
    assert h.leave(G, a).members[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    h = Harness()
    r1 = h.join(G, instance="i1")
    assert r1.error_code == 0 and r1.generation_id == 1
    old = r1.member_id
    h.sync(G, old, 1, {old: b"P0"}, instance="i1")
    r2 = h.join(G, instance="i1")  # restarted process, same instance id, no member id
    assert r2.error_code == 0 and r2.generation_id == 1 and r2.skip_assignment
    new = r2.member_id
    assert new != old
    g = h.table.groups[G]
    assert g.state is GroupState.STABLE and g.generation == 1 and len(h.rebalances) == 1
    assert h.sync(G, new, 1, instance="i1").assignment == b"P0"
    # the old incarnation is fenced everywhere
    assert h.heartbeat(G, old, 1, instance="i1") == ErrorCode.FENCED_INSTANCE_ID
    assert h.commit(G, old, 1, {("t", 0): 5}, instance="i1").error_code == (
        ErrorCode.FENCED_INSTANCE_ID
    )
    assert h.commit(G, new, 1, {("t", 0): 5}, instance="i1").error_code == ErrorCode.NONE


def test_stale_generation_commit_rejected_and_offsets_kept() -> None:
    h = Harness()
    a, b, gen = stable_pair(h)
    assert h.commit(G, b, gen, {("t", 1): 10}).partitions[0].error_code == ErrorCode.NONE
    h.leave(G, a)  # rebalance: b's generation becomes stale
    h.join(G, b)
    assert h.table.groups[G].generation == gen + 1
    stale = h.commit(G, b, gen, {("t", 1): 3})
    assert stale.error_code == ErrorCode.ILLEGAL_GENERATION
    assert h.commit(G, a, gen + 1, {("t", 1): 3}).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.committed(G) == {("t", 1): 10}
    # CompletingRebalance: the current generation must sync first
    assert h.commit(G, b, gen + 1, {("t", 1): 11}).error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_admin_commit_only_without_members() -> None:
    h = Harness()
    assert h.commit("fresh", "", -1, {("t", 0): 7}).partitions[0].error_code == 0
    assert h.committed("fresh") == {("t", 0): 7}
    _a, _, _ = stable_pair(h)
    refused = h.commit(G, "", -1, {("t", 0): 1})
    assert refused.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert "active members" in refused.error_message
    assert h.committed(G) == {}
    bad = h.commit("fresh", "", -1, {("t", 0): -5})
    assert bad.partitions[0].error_code == ErrorCode.INVALID_REQUEST
    assert h.committed("fresh") == {("t", 0): 7}


def test_subscription_change_triggers_rebalance() -> None:
    h = Harness()
    a, b, gen = stable_pair(h)
    same = h.join(G, b)  # same metadata, a follower: answered at once, no rebalance
    assert same.generation_id == gen and same.leader == a
    assert h.table.groups[G].state is GroupState.STABLE
    assert h.join(G, b, topics=("t", "u")) is PARKED
    assert h.table.groups[G].state is GroupState.PREPARING_REBALANCE
    r = h.join(G, a)
    assert r.generation_id == gen + 1
    metas = {m.member_id: pb.ConsumerSubscription.FromString(m.metadata) for m in r.members}
    assert list(metas[b].topics) == ["t", "u"]


def test_delete_groups_and_expiry() -> None:
    h = Harness()
    a, b, gen = stable_pair(h)
    from services.coordinator import offsets

    res, _ = offsets.delete(h.table, G, h.ctx())
    assert res.error_code == ErrorCode.NON_EMPTY_GROUP
    res, _ = offsets.delete(h.table, "nope", h.ctx())
    assert res.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    h.commit(G, a, gen, {("t", 0): 4})
    h.leave(G, a)
    h.leave(G, b)
    assert h.table.groups[G].state is GroupState.EMPTY
    res, out = offsets.delete(h.table, G, h.ctx())
    assert res.error_code == ErrorCode.NONE
    h.apply(out)
    assert G not in h.table.groups and h.log[-1][1] is None
    # retention: an Empty group's offsets expire, then the group goes
    h.commit("old", "", -1, {("t", 0): 1})
    h.now += 59_000
    h.tick()
    assert h.committed("old") == {("t", 0): 1}
    h.now += 2_000
    h.tick()
    assert "old" not in h.table.groups


def test_replay_rebuilds_the_live_state() -> None:
    h = Harness()
    a, b, gen = stable_pair(h)
    h.commit(G, a, gen, {("t", 0): 10, ("t", 1): 20})
    h.join(G, instance="s1")  # a static member joins: rebalance in progress
    h.join(G, a)
    h.join(G, b)
    h.commit("admin", "", -1, {("u", 0): 3})
    live = h.table.durable_view()
    assert h.replayed().durable_view() == live
    assert h.replayed().groups[G].state is GroupState.COMPLETING_REBALANCE


def test_replay_ignores_records_of_a_deposed_owner() -> None:
    t = GroupTable()
    t.replay(rec.marker(3, 2).key, rec.marker(3, 2).value, 3, 0)
    key = b"o\x00g\x00t\x000"
    value = b'{"offset": 1, "leader_epoch": -1, "metadata": "", "commit_timestamp": 0}'
    assert not t.replay(key, value, 2, 0)
    assert t.get("g") is None
    assert t.replay(key, value, 3, 0)
    assert t.groups["g"].offsets[("t", 0)].offset == 1
    assert t.marker_epoch == 3 and t.marker_owner == 2


def test_group_partition_is_the_crc32c_rule_of_the_proto() -> None:
    """coordinator.proto: a group lives in unsigned CRC32C(group id) mod partitions."""
    import crc32c

    from services.coordinator.ownership import partition_for

    for group in ("orders", "payments-v2", "é-group", ""):
        assert partition_for(group, 12) == crc32c.crc32c(group.encode()) % 12


def test_repair_keeps_committed_offsets_through_compaction_of_a_fenced_late_write() -> None:
    """A deposed owner's late commit (epoch 1, after epoch 2's marker) is ignored by replay,
    but compaction keeps the latest record per key: unrepaired, it shadows the valid offset
    and a later replay loses it. The owner restates the key (current_record) and the
    compacted log replays to the valid value."""

    def offset_rec(value: int, epoch: int) -> rec.Record:
        return rec.Record(rec.OffsetCommit("g", "t", 0, rec.Offset(value, -1, "", 1)), epoch)

    def replay_all(records: list[rec.Record]) -> GroupTable:
        t = GroupTable()
        for r in records:
            t.replay(r.key, r.value, r.epoch, 0)
        return t

    def compact(records: list[rec.Record]) -> list[rec.Record]:
        latest = {r.key: i for i, r in enumerate(records)}
        return [r for i, r in enumerate(records) if latest[r.key] == i]

    log = [rec.marker(1, 1), offset_rec(10, 1), rec.marker(2, 2)]
    owner = replay_all(log)
    late = offset_rec(99, 1)  # coordinator 1 did not know it was deposed
    assert not owner.apply(late, 0)
    log.append(late)

    unrepaired = replay_all(compact(log))
    assert unrepaired.get("g") is None or ("t", 0) not in unrepaired.get("g").offsets  # type: ignore[union-attr]

    repair = owner.current_record(late.key, 2)
    assert owner.apply(repair, 0)
    log.append(repair)
    for records in (log, compact(log)):
        g = replay_all(records).get("g")
        assert g is not None and g.offsets[("t", 0)].offset == 10
    # markers have one key per epoch: compaction keeps both
    assert sum(1 for r in compact(log) if r.key.startswith(rec.MARKER_PREFIX)) == 2
