"""Partition-count watch: the pure decision, and what a triggered rebalance does to a group."""

from __future__ import annotations

import pytest

from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import membership, offsets
from services.coordinator.group import GroupState
from services.coordinator.topic_watch import MAX_ATTEMPTS, GroupTopics, Seen, groups_to_rebalance
from tests.coordinator.harness import Harness

pytestmark = pytest.mark.fast


def gt(
    group: str, *topics: str, state: str = "Stable", gen: int = 1, **assigned: int
) -> GroupTopics:
    return GroupTopics(group, state, frozenset(topics), gen, assigned)


def test_first_sight_rebases_on_the_assignment() -> None:
    # assigned from 2 and 3 partitions, metadata agrees: remembered, no rebalance
    trigger, seen = groups_to_rebalance([gt("g", "a", "b", a=2, b=3)], {"a": 2, "b": 3}, {})
    assert trigger == [] and seen == {"g": Seen(1, {"a": 2, "b": 3})}
    # the topic grew before the watch first saw the group: the assignment tells
    trigger, seen = groups_to_rebalance([gt("g", "a", a=2)], {"a": 4}, {})
    assert trigger == ["g"] and seen == {"g": Seen(1, {"a": 4}, {"a": 4}, 1)}


def test_changed_count_triggers_once_per_generation() -> None:
    groups = [gt("g1", "a", a=2), gt("g2", "b", b=3), gt("g3", "a", "b", a=2, b=3)]
    _, seen0 = groups_to_rebalance(groups, {"a": 2, "b": 3}, {})
    trigger, seen = groups_to_rebalance(groups, {"a": 4, "b": 3}, seen0)
    assert trigger == ["g1", "g3"]
    assert seen["g1"].counts == {"a": 4} and seen["g2"] == seen0["g2"]
    # same generation (the trigger not yet acted on): no second trigger
    trigger, seen2 = groups_to_rebalance(groups, {"a": 4, "b": 3}, seen)
    assert trigger == [] and seen2 == seen
    # the rebalance completed and assigned all 4: settled
    done = [gt("g1", "a", gen=2, a=4), gt("g2", "b", b=3), gt("g3", "a", "b", gen=2, a=4, b=3)]
    trigger, seen3 = groups_to_rebalance(done, {"a": 4, "b": 3}, seen2)
    assert trigger == [] and seen3["g1"].counts == {"a": 4}


def test_stale_leader_retriggers_a_bounded_number_of_times() -> None:
    _, seen = groups_to_rebalance([gt("g", "a", a=2)], {"a": 2}, {})
    triggered = 0
    for gen in range(1, 10):  # every rebalance still assigns from 2 partitions only
        trigger, seen = groups_to_rebalance([gt("g", "a", gen=gen, a=2)], {"a": 4}, seen)
        triggered += len(trigger)
    assert triggered == MAX_ATTEMPTS
    # a new change is acted on again
    trigger, _ = groups_to_rebalance([gt("g", "a", gen=11, a=2)], {"a": 6}, seen)
    assert trigger == ["g"]


def test_unstable_group_keeps_pending_change_until_stable() -> None:
    _, seen0 = groups_to_rebalance([gt("g", "a", a=2)], {"a": 2}, {})
    for state in ("PreparingRebalance", "CompletingRebalance", "Empty"):
        trigger, seen = groups_to_rebalance([gt("g", "a", state=state)], {"a": 4}, seen0)
        assert trigger == [] and seen == seen0
    trigger, seen = groups_to_rebalance([gt("g", "a", state=state)], {"a": 4}, {})
    assert trigger == [] and seen == {}
    trigger, seen = groups_to_rebalance([gt("g", "a", a=2)], {"a": 4}, seen0)
    assert trigger == ["g"] and seen["g"].counts == {"a": 4}


def test_new_topic_unknown_topic_and_forgotten_group() -> None:
    # a newly subscribed topic with nothing assigned yet is learnt as is, an unknown one
    # ignored, a group no longer owned dropped
    _, seen0 = groups_to_rebalance([gt("g", "a", a=2), gt("gone", "a", a=2)], {"a": 2}, {})
    trigger, seen = groups_to_rebalance([gt("g", "a", "b", "missing")], {"a": 2, "b": 5}, seen0)
    assert trigger == []
    assert seen == {"g": Seen(1, {"a": 2, "b": 5})}


def test_assigned_counts() -> None:
    a1 = pb.ConsumerAssignment(
        partitions=[pb.TopicPartitions(topic="a", partitions=[0, 2]),
                    pb.TopicPartitions(topic="b", partitions=[])]
    ).SerializeToString()  # fmt: skip
    a2 = pb.ConsumerAssignment(
        partitions=[pb.TopicPartitions(topic="a", partitions=[3, 1])]
    ).SerializeToString()
    assert offsets.assigned_counts([a1, a2, b"", b"\xff"]) == {"a": 4}


def test_subscribed_topics_decodes_consumer_metadata_only() -> None:
    sub = pb.ConsumerSubscription(topics=["a", "b"]).SerializeToString()
    other = pb.ConsumerSubscription(topics=["c"]).SerializeToString()
    assert offsets.subscribed_topics("consumer", [sub, other, b"\xff\xff"]) == {"a", "b", "c"}
    assert offsets.subscribed_topics("connect", [sub]) == frozenset()


def test_trigger_rebalance_moves_stable_group_to_preparing() -> None:
    h, g = Harness(), "grp"
    a = h.join_dynamic(g)
    ra = h.join(g, a)
    assert ra.error_code == 0 and ra.generation_id == 1
    assert h.sync(g, a, 1, {a: b"A"}).assignment == b"A"
    assert h.table.groups[g].state is GroupState.STABLE
    assert h.apply(membership.trigger_rebalance(h.table, "nope", h.ctx())) is None
    h.apply(membership.trigger_rebalance(h.table, g, h.ctx()))
    assert h.table.groups[g].state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(g, a, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    ra = h.join(g, a)
    assert ra.error_code == 0 and ra.generation_id == 2


def test_stable_group_with_nothing_assigned_for_a_subscribed_topic_rebalances() -> None:
    """The leader assigned from metadata that lacked a just-created topic: the group is
    Stable with nothing of it assigned, so the watch must trigger a rebalance."""
    trigger, seen = groups_to_rebalance([gt("g", "new")], {"new": 2}, {})
    assert trigger == ["g"] and seen["g"].target == {"new": 2}
