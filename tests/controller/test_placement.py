"""Replica placement (Kafka's algorithm) and leader election: pure functions."""

from __future__ import annotations

from collections import Counter

import pytest

from headwater import errors
from services.controller import state as st
from services.controller.leadership import elect
from services.controller.placement import assign_replicas, rack_alternated, start_index_for

pytestmark = pytest.mark.fast


def test_round_robin_matches_kafka_example() -> None:
    # Kafka's AdminUtils doc example: 5 brokers, 10 partitions, rf 3, start index 0
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0)
    assert got == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


@pytest.mark.parametrize(("brokers", "partitions", "rf"), [(3, 9, 2), (4, 12, 3), (5, 50, 3)])
def test_leaders_and_replicas_spread_evenly(brokers: int, partitions: int, rf: int) -> None:
    ids = list(range(10, 10 + brokers))
    got = assign_replicas(ids, partitions, rf, start_index=1)
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf == len(set(replicas))
        assert set(replicas) <= set(ids)
    leaders = Counter(r[0] for r in got.values())
    assert set(leaders.values()) == {partitions // brokers}
    load = Counter(b for r in got.values() for b in r)
    assert max(load.values()) - min(load.values()) <= 1


def test_rack_alternated_order() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "c", 4: "c", 5: "b"}
    assert rack_alternated(racks) == [0, 2, 3, 1, 5, 4]


def test_rack_aware_puts_replicas_on_distinct_racks() -> None:
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    got = assign_replicas(racks, 30, 3, start_index=0)
    for replicas in got.values():
        assert len({racks[b] for b in replicas}) == 3
        assert len(set(replicas)) == 3
    leaders = Counter(r[0] for r in got.values())
    assert set(leaders.values()) == {5}
    # rf larger than the number of racks: every rack still used, no broker twice
    got2 = assign_replicas({1: "a", 2: "a", 3: "b", 4: "b"}, 8, 3, start_index=0)
    for replicas in got2.values():
        assert len(set(replicas)) == 3
        assert {"a", "b"} == {"a" if b <= 2 else "b" for b in replicas}


def test_mixed_rack_declarations_fall_back_to_round_robin() -> None:
    got = assign_replicas({1: "a", 2: None, 3: ""}, 3, 1, start_index=0)
    assert got == {0: [1], 1: [2], 2: [3]}


def test_adding_partitions_continues_the_walk() -> None:
    full = assign_replicas([0, 1, 2], 6, 2, start_index=0)
    tail = assign_replicas(
        [0, 1, 2], 3, 2, start_index=start_index_for([0, 1, 2], full[0][0]), start_partition=3
    )
    assert tail == {p: full[p] for p in (3, 4, 5)}


def test_invalid_requests_raise_typed_errors() -> None:
    with pytest.raises(errors.InvalidReplicationFactorError):
        assign_replicas([1, 2], 1, 3)
    with pytest.raises(errors.InvalidReplicationFactorError):
        assign_replicas([1, 2], 1, 0)
    with pytest.raises(errors.InvalidPartitionsError):
        assign_replicas([1, 2], 0, 1)


def _ps(leader: int, isr: tuple[int, ...], le: int = 3, pe: int = 5) -> st.PartitionState:
    return st.PartitionState(leader, le, isr, pe, 1, mod_revision=77)


def test_elect_new_partition_first_live_replica() -> None:
    s = elect([2, 1, 3], None, {1, 2, 3}, 4)
    assert s is not None and (s.leader, s.isr, s.leader_epoch, s.controller_epoch) == (
        2,
        (2, 1, 3),
        0,
        4,
    )
    assert s.mod_revision == 0


def test_elect_leader_failover_from_isr() -> None:
    s = elect([1, 2, 3], _ps(1, (1, 2, 3)), {2, 3}, 9)
    assert s is not None
    assert (s.leader, s.isr, s.leader_epoch, s.partition_epoch, s.controller_epoch) == (
        2,
        (2, 3),
        4,
        6,
        9,
    )
    assert s.mod_revision == 77  # the CAS compares what was read


def test_elect_follower_loss_shrinks_isr_without_leader_change() -> None:
    s = elect([1, 2], _ps(1, (1, 2)), {1}, 2)
    assert s is not None and (s.leader, s.isr, s.leader_epoch, s.partition_epoch) == (1, (1,), 3, 6)
    assert elect([1, 2], _ps(1, (1,)), {1}, 2) is None


def test_elect_no_live_isr_goes_offline_then_returns() -> None:
    off = elect([1, 2], _ps(1, (1,)), {2}, 2)
    assert off is not None and (off.leader, off.isr, off.leader_epoch) == (-1, (1,), 4)
    assert elect([1, 2], off, {2}, 2) is None  # still offline, nothing to write
    back = elect([1, 2], off, {1, 2}, 2)
    assert back is not None and (back.leader, back.leader_epoch) == (1, 5)


def test_elect_unclean_picks_live_replica_outside_isr() -> None:
    s = elect([1, 2], _ps(1, (1,)), {2}, 2, unclean=True)
    assert s is not None and (s.leader, s.isr) == (2, (2,))
