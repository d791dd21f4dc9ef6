"""Partition-count watch: the pure decision, and what a triggered rebalance does to a group."""

from __future__ import annotations

from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import membership, offsets
from services.coordinator.group import GroupState
from services.coordinator.topic_watch import GroupTopics, groups_to_rebalance
from tests.coordinator.harness import Harness


def gt(group: str, *topics: str, state: str = "Stable") -> GroupTopics:
    return GroupTopics(group, state, frozenset(topics))


def test_first_sight_remembers_without_rebalance() -> None:
    trigger, seen = groups_to_rebalance([gt("g", "a", "b")], {"a": 2, "b": 3, "x": 9}, {})
    assert trigger == []
    assert seen == {"g": {"a": 2, "b": 3}}


def test_changed_count_triggers_and_is_remembered() -> None:
    groups = [gt("g1", "a"), gt("g2", "b"), gt("g3", "a", "b")]
    seen0 = {"g1": {"a": 2}, "g2": {"b": 3}, "g3": {"a": 2, "b": 3}}
    trigger, seen = groups_to_rebalance(groups, {"a": 4, "b": 3}, seen0)
    assert trigger == ["g1", "g3"]
    assert seen == {"g1": {"a": 4}, "g2": {"b": 3}, "g3": {"a": 4, "b": 3}}
    trigger, seen2 = groups_to_rebalance(groups, {"a": 4, "b": 3}, seen)
    assert trigger == [] and seen2 == seen


def test_unstable_group_keeps_pending_change_until_stable() -> None:
    seen0 = {"g": {"a": 2}}
    for state in ("PreparingRebalance", "Empty"):
        trigger, seen = groups_to_rebalance([gt("g", "a", state=state)], {"a": 4}, seen0)
        assert trigger == [] and seen == seen0
    trigger, seen = groups_to_rebalance(
        [gt("g", "a", state="CompletingRebalance")], {"a": 4}, seen0
    )
    assert trigger == ["g"] and seen == {"g": {"a": 4}}


def test_new_topic_unknown_topic_and_forgotten_group() -> None:
    # a newly subscribed topic is learnt (its own join rebalanced), an unknown one ignored,
    # a group no longer owned is dropped
    seen0 = {"g": {"a": 2}, "gone": {"a": 2}}
    trigger, seen = groups_to_rebalance([gt("g", "a", "b", "missing")], {"a": 2, "b": 5}, seen0)
    assert trigger == []
    assert seen == {"g": {"a": 2, "b": 5}}


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
