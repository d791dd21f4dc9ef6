"""Election, ISR and reassignment decisions as pure functions (no I/O)."""

from __future__ import annotations

import dataclasses

import pytest

from headwater.v1.errors_pb2 import ErrorCode
from services.controller import leadership as ld
from services.controller import reassignment as ra
from services.controller import state as st

pytestmark = pytest.mark.fast


def ps(
    leader: int,
    isr: tuple[int, ...],
    le: int = 3,
    pe: int = 5,
    adding: tuple[int, ...] = (),
    removing: tuple[int, ...] = (),
) -> st.PartitionState:
    return st.PartitionState(leader, le, isr, pe, 1, 77, adding, removing)


def test_failover_prefers_the_preferred_replica_when_in_isr() -> None:
    s = ld.elect([2, 1, 3], ps(1, (1, 3, 2)), {2, 3}, 9)
    assert s is not None and (s.leader, s.isr, s.leader_epoch, s.partition_epoch) == (
        2,
        (3, 2),
        4,
        6,
    )
    # preferred replica alive but not in the ISR: the next ISR member in replica order
    s = ld.elect([2, 1, 3], ps(1, (1, 3)), {2, 3}, 9)
    assert s is not None and (s.leader, s.isr) == (3, (3,))


def test_dead_follower_leaves_isr_of_partitions_it_did_not_lead() -> None:
    s = ld.elect([1, 2, 3], ps(1, (1, 2, 3)), {1, 3}, 2)
    assert s is not None and (s.leader, s.isr, s.leader_epoch, s.partition_epoch) == (
        1,
        (1, 3),
        3,
        6,
    )


def test_unclean_only_when_enabled_and_no_isr_member_lives() -> None:
    clean = ld.elect([1, 2, 3], ps(1, (1,)), {2, 3}, 2)
    assert clean is not None and (clean.leader, clean.isr) == (-1, (1,))
    dirty = ld.elect([1, 2, 3], ps(1, (1,)), {2, 3}, 2, unclean=True)
    assert dirty is not None and (dirty.leader, dirty.isr, dirty.leader_epoch) == (2, (2,), 4)
    # an ISR member alive: unclean setting changes nothing
    s = ld.elect([1, 2, 3], ps(1, (1, 3)), {2, 3}, 2, unclean=True)
    assert s is not None and (s.leader, s.isr) == (3, (3,))


def test_shutting_down_brokers_are_never_elected() -> None:
    s = ld.elect([1, 2, 3], ps(1, (1, 2, 3)), {2, 3}, 2, shutting={2})
    assert s is not None and (s.leader, s.isr) == (3, (3,))
    new = ld.elect([1, 2], None, {1, 2}, 2, shutting={1})
    assert new is not None and (new.leader, new.isr) == (2, (2,))


def test_shutdown_move_leaders_and_followers() -> None:
    led = ld.shutdown_move([1, 2, 3], ps(1, (1, 2, 3)), {1, 2, 3}, {1}, 4)
    assert led is not None and (led.leader, led.isr, led.leader_epoch, led.partition_epoch) == (
        2,
        (2, 3),
        4,
        6,
    )
    follower = ld.shutdown_move([2, 1], ps(2, (2, 1)), {1, 2}, {1}, 4)
    assert follower is not None and (follower.leader, follower.isr, follower.leader_epoch) == (
        2,
        (2,),
        3,
    )
    # sole ISR member: it keeps leading (reported as remaining); not in ISR: nothing
    assert ld.shutdown_move([1, 2], ps(1, (1,)), {1, 2}, {1}, 4) is None
    assert ld.shutdown_move([2, 1], ps(2, (2,)), {1, 2}, {1}, 4) is None
    # and the broker-change election does not take it offline either
    assert ld.elect([1, 2], ps(1, (1,)), {1, 2}, 4, shutting={1}) is None


def test_preferred_election_outcomes() -> None:
    new, code, _ = ld.elect_preferred([1, 2], ps(2, (2, 1)), {1, 2}, 5)
    assert code == ErrorCode.NONE and new is not None
    assert (new.leader, new.leader_epoch, new.isr, new.controller_epoch) == (1, 4, (2, 1), 5)
    assert ld.elect_preferred([1, 2], ps(1, (1, 2)), {1, 2}, 5)[1] == ErrorCode.ELECTION_NOT_NEEDED
    not_isr = ld.elect_preferred([1, 2], ps(2, (2,)), {1, 2}, 5)
    assert (not_isr[0], not_isr[1]) == (None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
    dead = ld.elect_preferred([1, 2], ps(2, (2, 1)), {2}, 5)
    assert (dead[0], dead[1]) == (None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)


def test_unclean_election_request_outcomes() -> None:
    assert ld.elect_unclean([1, 2], ps(1, (1,)), {1, 2}, 5)[1] == ErrorCode.ELECTION_NOT_NEEDED
    new, code, _ = ld.elect_unclean([1, 2], ps(-1, (1,)), {2}, 5)
    assert code == ErrorCode.NONE and new is not None and (new.leader, new.isr) == (2, (2,))
    none = ld.elect_unclean([1, 2], ps(-1, (1,)), set(), 5)
    assert (none[0], none[1]) == (None, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)


def test_imbalance_ratio_over_ten_percent() -> None:
    # broker 1 prefers 10 partitions and leads 9 (10% not led: balanced); broker 2 leads 0 of 2
    parts = [([1, 2], 1)] * 9 + [([1, 2], 2)] + [([2, 1], 1)] * 2
    assert ld.imbalanced_brokers(parts, 10.0) == {2}
    assert ld.imbalanced_brokers(parts, 5.0) == {1, 2}


def test_isr_change_validation() -> None:
    cur = ps(1, (1, 2))
    live = {1, 2, 3}
    assert ld.check_isr_change([1, 2, 3], cur, [1, 2, 3], live) is None
    assert ld.check_isr_change([1, 2, 3], cur, [1], live) is None
    invalid, ineligible = ErrorCode.INVALID_REQUEST, ErrorCode.INELIGIBLE_REPLICA

    def code(new_isr: list[int], live: set[int], **kw: set[int]) -> int | None:
        why = ld.check_isr_change([1, 2, 3], cur, new_isr, live, **kw)
        assert why is None or why[1]  # every refusal says why
        return None if why is None else why[0]

    assert code([], live) == invalid
    assert code([1, 1], live) == invalid
    assert code([1, 4], live) == invalid
    assert code([2, 3], live) == invalid  # leader missing
    assert code([1, 2, 3], {1, 2}) == ineligible  # adding a dead broker
    assert code([1, 2, 3], live, shutting={3}) == ineligible
    assert code([1, 2, 3], live, offline={3}) == ineligible  # its replica is offline
    # keeping a member that died meanwhile, or whose replica went offline, is not an addition
    assert code([1, 2], {1}) is None
    assert code([1, 2], live, offline={2}) is None


def test_reassignment_start_catch_up_and_complete() -> None:
    cur = ps(1, (1, 2))
    step = ra.plan_start([1, 2], cur, [2, 3], {1, 2, 3}, 7)
    assert step is not None
    assert step.replicas == [2, 3, 1] and step.stop == ()
    s = step.state
    assert (s.adding_replicas, s.removing_replicas, s.leader, s.leader_epoch) == ((3,), (1,), 1, 3)
    assert s.partition_epoch == 6 and s.isr == (1, 2)
    # not complete until the adding replica is in the ISR
    assert ra.plan_complete(step.replicas, s, {1, 2, 3}, 7) is None
    caught_up = dataclasses.replace(s, isr=(1, 2, 3), partition_epoch=7)
    done = ra.plan_complete(step.replicas, caught_up, {1, 2, 3}, 7)
    assert done is not None and done.replicas == [2, 3] and done.stop == (1,)
    d = done.state
    # the leader (1) was removed: the first target replica in the ISR leads, new epoch
    assert (d.leader, d.leader_epoch, d.isr, d.partition_epoch) == (2, 4, (2, 3), 8)
    assert not d.reassigning


def test_reassignment_keeps_a_leader_that_stays_and_noop_and_reorder() -> None:
    cur = ps(2, (1, 2))
    step = ra.plan_start([1, 2], cur, [2, 3], {1, 2, 3}, 7)
    assert step is not None
    done = ra.plan_complete(
        step.replicas, dataclasses.replace(step.state, isr=(1, 2, 3)), {1, 2, 3}, 7
    )
    assert done is not None and (done.state.leader, done.state.leader_epoch) == (2, 3)
    assert ra.plan_start([1, 2], cur, [1, 2], {1, 2}, 7) is None
    reorder = ra.plan_start([1, 2], cur, [2, 1], {1, 2}, 7)
    assert reorder is not None and reorder.replicas == [2, 1] and not reorder.state.reassigning
    # a pure shrink completes at once (nothing to add)
    shrink = ra.plan_start([1, 2], cur, [2], {1, 2}, 7)
    assert shrink is not None and shrink.state.removing_replicas == (1,)
    assert ra.plan_complete(shrink.replicas, shrink.state, {1, 2}, 7) is not None


def test_reassignment_cancel_and_replace() -> None:
    cur = ps(1, (1, 2, 3), adding=(3,), removing=(1,))
    cancel = ra.plan_cancel([2, 3, 1], cur, {1, 2, 3}, 7)
    # as Kafka: original = replicas - adding (order of the merged list, target first)
    assert cancel.replicas == [2, 1] and cancel.stop == (3,)
    assert (cancel.state.isr, cancel.state.leader, cancel.state.reassigning) == ((1, 2), 1, False)
    # a new target replaces the ongoing one, computed from the original replicas [1, 2]
    new = ra.plan_start([2, 3, 1], cur, [1, 4], {1, 2, 3, 4}, 7)
    assert new is not None and new.replicas == [1, 4, 2] and new.stop == (3,)
    assert (new.state.adding_replicas, new.state.removing_replicas) == ((4,), (2,))
    assert new.state.isr == (1, 2)
    assert ra.check_target([1, 1], {1}) and ra.check_target([1, 9], {1, 2})
    assert ra.check_target([2, 1], {1, 2}) is None


def test_partition_state_codec_keeps_reassignment_fields() -> None:
    s = ps(1, (1, 2), adding=(3,), removing=(1,))
    assert st.PartitionState.decode(s.encode(), 77) == s
    plain = ps(1, (1,))
    assert b"adding" not in plain.encode()
    assert st.PartitionState.decode(plain.encode(), 77) == plain


def test_offline_replicas_are_never_elected_and_leave_the_isr() -> None:
    # the leader refused the partition: leadership moves to a live ISR member, ISR shrinks
    s = ld.elect([1, 2, 3], ps(1, (1, 2, 3)), {1, 2, 3}, 4, offline={1})
    assert s is not None and (s.leader, s.isr, s.leader_epoch) == (2, (2, 3), 4)
    # a follower refused it: the leader stays, the follower leaves the ISR
    s = ld.elect([1, 2, 3], ps(1, (1, 2, 3)), {1, 2, 3}, 4, offline={3})
    assert s is not None and (s.leader, s.isr, s.leader_epoch) == (1, (1, 2), 3)
    # every ISR member refused it: no leader (unlike a shutting-down leader, which stays)
    s = ld.elect([1, 2, 3], ps(1, (1, 3)), {1, 2, 3}, 4, offline={1, 3})
    assert s is not None and (s.leader, s.isr) == (-1, (1, 3))
    assert ld.elect([1, 2, 3], ps(1, (1,)), {1, 2, 3}, 4, shutting={1}) is None
    # unclean election never picks an offline replica either
    s = ld.elect([1, 2, 3], ps(1, (1,)), {1, 2, 3}, 4, offline={1, 2}, unclean=True)
    assert s is not None and (s.leader, s.isr) == (3, (3,))
    # a new partition: the first replica that is neither dead nor offline leads
    s = ld.elect([1, 2, 3], None, {1, 2, 3}, 4, offline={1})
    assert s is not None and (s.leader, s.isr) == (2, (2, 3))
    # already out: nothing to change
    assert ld.elect([1, 2, 3], ps(2, (2, 3)), {1, 2, 3}, 4, offline={1}) is None


def test_operator_and_shutdown_elections_never_pick_an_offline_replica() -> None:
    # preferred election: the preferred replica is live and in the ISR but refused it
    new, code, msg = ld.elect_preferred([1, 2], ps(2, (2, 1)), {1, 2}, 5, offline={1})
    assert (new, code) == (None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE) and "offline" in msg
    # unclean election: a live leader whose replica is offline does not count as leading,
    # and the replacement is never an offline replica
    new, code, _ = ld.elect_unclean([1, 2, 3], ps(1, (1,)), {1, 2, 3}, 5, offline={1, 2})
    assert code == ErrorCode.NONE and new is not None and (new.leader, new.isr) == (3, (3,))
    none = ld.elect_unclean([1, 2], ps(-1, (1,)), {1, 2}, 5, offline={1, 2})
    assert (none[0], none[1]) == (None, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
    # controlled shutdown: leadership skips the offline ISR member for the next one
    s = ld.shutdown_move([1, 2, 3], ps(1, (1, 2, 3)), {1, 2, 3}, {1}, 4, offline={2})
    assert s is not None and (s.leader, s.isr) == (3, (2, 3))
    # only offline successors: the shutting-down leader stays (reported as remaining)
    assert ld.shutdown_move([1, 2], ps(1, (1, 2)), {1, 2}, {1}, 4, offline={2}) is None


def test_reassignment_never_moves_leadership_to_an_offline_replica() -> None:
    # completing [1, 2] -> [3, 4]: the first target ISR member (3) refused it, 4 leads
    cur = ps(1, (1, 2, 3, 4), adding=(3, 4), removing=(1, 2))
    step = ra.plan_complete([3, 4, 1, 2], cur, {1, 2, 4}, 6)
    assert step is not None and step.state.leader == 4
    # only offline target replicas: not complete yet (no one in the target can lead)
    assert ra.plan_complete([3, 4, 1, 2], cur, {1, 2}, 6) is None
