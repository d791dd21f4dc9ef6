"""Assignor unit tests (pure logic): Kafka's semantics for range, roundrobin, sticky and
cooperative-sticky — balance, stickiness, and KIP-429's "never assign a partition that
another member still owns in the same round"."""

from __future__ import annotations

import random

import pytest

from headwater import errors
from headwater.client.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    resolve,
)
from headwater.client.types import TopicPartition as TP

pytestmark = pytest.mark.fast


def subs(n: int, topics: tuple[str, ...] = ("t",)) -> dict[str, Subscription]:
    return {f"m{i}": Subscription(topics=topics) for i in range(n)}


def flat(assignment: dict[str, list[TP]]) -> list[TP]:
    return [tp for tps in assignment.values() for tp in tps]


def test_range_contiguous_runs_first_members_take_extra() -> None:
    out = RangeAssignor().assign(subs(3, ("a", "b")), {"a": 7, "b": 2})
    assert out["m0"] == [TP("a", 0), TP("a", 1), TP("a", 2), TP("b", 0)]
    assert out["m1"] == [TP("a", 3), TP("a", 4), TP("b", 1)]
    assert out["m2"] == [TP("a", 5), TP("a", 6)]


def test_range_static_members_sorted_by_instance_id_and_only_subscribers() -> None:
    members = {
        "zzz": Subscription(topics=("a",), group_instance_id="i0"),
        "aaa": Subscription(topics=("a",), group_instance_id="i1"),
        "mmm": Subscription(topics=("b",)),
    }
    out = RangeAssignor().assign(members, {"a": 2, "b": 1, "unknown": 3})
    assert out == {"zzz": [TP("a", 0)], "aaa": [TP("a", 1)], "mmm": [TP("b", 0)]}


def test_roundrobin_deals_in_turn_skipping_unsubscribed() -> None:
    out = RoundRobinAssignor().assign(subs(2, ("a", "b")), {"a": 3, "b": 2})
    assert out["m0"] == [TP("a", 0), TP("a", 2), TP("b", 1)]
    assert out["m1"] == [TP("a", 1), TP("b", 0)]
    mixed = {"m0": Subscription(topics=("a",)), "m1": Subscription(topics=("a", "b"))}
    out = RoundRobinAssignor().assign(mixed, {"a": 2, "b": 2})
    assert out == {"m0": [TP("a", 0)], "m1": [TP("a", 1), TP("b", 0), TP("b", 1)]}


@pytest.mark.parametrize("cls", [RangeAssignor, RoundRobinAssignor, StickyAssignor])
def test_every_partition_exactly_once(cls: type) -> None:
    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(1, 6)
        counts = {t: rng.randint(1, 9) for t in ("a", "b", "c")}
        members = {
            f"m{i}": Subscription(topics=tuple(rng.sample(["a", "b", "c"], rng.randint(1, 3))))
            for i in range(n)
        }
        out = cls().assign(members, counts)
        got = flat(out)
        subscribed = {t for s in members.values() for t in s.topics}
        assert sorted(got) == sorted(TP(t, p) for t in subscribed for p in range(counts[t]))
        for m, tps in out.items():
            assert all(tp.topic in members[m].topics for tp in tps)


def test_sticky_balanced_and_keeps_previous_owners() -> None:
    counts = {"t": 10}
    first = StickyAssignor().assign(subs(3), counts)
    assert sorted(len(v) for v in first.values()) == [3, 3, 4]
    # a fourth member joins: each old member keeps what it had except what must move
    members = {
        m: Subscription(topics=("t",), owned_partitions=tuple(tps), generation_id=1)
        for m, tps in first.items()
    }
    members["m3"] = Subscription(topics=("t",))
    second = StickyAssignor().assign(members, counts)
    assert sorted(len(v) for v in second.values()) == [2, 2, 3, 3]
    moved = sum(1 for m in first for tp in first[m] if tp not in second[m])
    assert moved == len(second["m3"])  # only what the newcomer needs moves
    # a member leaves: survivors keep everything they had
    del members["m1"]
    members = {
        m: Subscription(topics=("t",), owned_partitions=tuple(second[m]), generation_id=2)
        for m in members
    }
    third = StickyAssignor().assign(members, counts)
    for m in members:
        assert set(second[m]) <= set(third[m])
    assert sorted(len(v) for v in third.values()) == [3, 3, 4]


def test_sticky_conflicting_claims_highest_generation_wins_and_stale_claims_dropped() -> None:
    members = {
        "a": Subscription(
            topics=("t",), owned_partitions=(TP("t", 0), TP("t", 5)), generation_id=3
        ),
        "b": Subscription(topics=("t",), owned_partitions=(TP("t", 0),), generation_id=4),
    }
    out = StickyAssignor().assign(members, {"t": 2})
    assert TP("t", 0) in out["b"] and TP("t", 1) in out["a"]
    assert TP("t", 5) not in flat(out)


def test_sticky_unequal_subscriptions_no_move_improves_balance() -> None:
    members = {
        "a": Subscription(topics=("x",)),
        "b": Subscription(topics=("x", "y")),
        "c": Subscription(topics=("y",)),
    }
    out = StickyAssignor().assign(members, {"x": 4, "y": 4})
    for src in out:
        for dst in out:
            if len(out[src]) - len(out[dst]) >= 2:
                assert not any(tp.topic in members[dst].topics for tp in out[src])


def _cooperative_round(
    owned: dict[str, list[TP]], gen: int, topics: dict[str, tuple[str, ...]], counts: dict[str, int]
) -> dict[str, list[TP]]:
    members = {
        m: Subscription(
            topics=topics[m], owned_partitions=tuple(owned.get(m, [])), generation_id=gen
        )
        for m in topics
    }
    out = CooperativeStickyAssignor().assign(members, counts)
    # KIP-429: nothing is handed to a member while another member still owns it
    for m, tps in out.items():
        for tp in tps:
            assert not any(tp in owned.get(o, []) for o in topics if o != m), (m, tp)
    return out


def test_cooperative_revokes_first_then_hands_over_and_unaffected_stay() -> None:
    counts = {"t": 12}
    topics = {f"m{i}": ("t",) for i in range(3)}
    owned = _cooperative_round({}, 0, topics, counts)
    assert sorted(len(v) for v in owned.values()) == [4, 4, 4]
    # two members join: round 1 takes partitions away from the old owners only
    topics.update({"m3": ("t",), "m4": ("t",)})
    before = {m: list(v) for m, v in owned.items()}
    r1 = _cooperative_round(owned, 1, topics, counts)
    assert r1["m3"] == [] and r1["m4"] == []
    for m in before:
        assert set(r1[m]) <= set(before[m])  # old owners only lose partitions
    revoked = [tp for m in before for tp in before[m] if tp not in r1[m]]
    assert len(revoked) == 4  # 12 over 5 members: 3,3,2 stay, the newcomers need 2 each
    # each member applies its assignment (revoking the missing), then the follow-up rebalance
    r2 = _cooperative_round(r1, 2, topics, counts)
    assert sorted(len(v) for v in r2.values()) == [2, 2, 2, 3, 3]
    for m in before:
        assert set(r1[m]) <= set(r2[m])  # nothing kept in round 1 moves in round 2
    assert sorted(flat(r2)) == [TP("t", p) for p in range(12)]


def test_cooperative_random_membership_changes_converge() -> None:
    rng = random.Random(11)
    counts = {"a": 6, "b": 5}
    topics: dict[str, tuple[str, ...]] = {}
    owned: dict[str, list[TP]] = {}
    gen = 0
    for step in range(30):
        if topics and rng.random() < 0.4:
            gone = rng.choice(sorted(topics))
            del topics[gone]
            owned.pop(gone, None)
        else:
            topics[f"m{step}"] = ("a", "b")
        if not topics:
            continue
        for _ in range(3):  # a cooperative rebalance settles within two rounds
            gen += 1
            owned = _cooperative_round(owned, gen, topics, counts)
        assert sorted(flat(owned)) == sorted(TP(t, p) for t in counts for p in range(counts[t]))
        loads = [len(v) for v in owned.values()]
        assert max(loads) - min(loads) <= 1


def test_codec_roundtrip_and_bad_bytes() -> None:
    sub = Subscription(
        topics=("b", "a"),
        owned_partitions=(TP("a", 1), TP("a", 0)),
        generation_id=5,
        user_data=b"u",
    )
    back = decode_subscription(encode_subscription(sub), "inst")
    assert back.topics == ("a", "b")
    assert sorted(back.owned_partitions) == [TP("a", 0), TP("a", 1)]
    assert (back.generation_id, back.user_data, back.group_instance_id) == (5, b"u", "inst")
    a = decode_assignment(encode_assignment([TP("x", 2), TP("y", 0)], b"d"))
    assert a.partitions == (TP("x", 2), TP("y", 0)) and a.user_data == b"d"
    with pytest.raises(errors.InconsistentGroupProtocolError):
        decode_assignment(b"\xff\xff\xff")


def test_resolve_names() -> None:
    assert [a.name for a in resolve(["range", "cooperative-sticky"])] == [
        "range",
        "cooperative-sticky",
    ]
    with pytest.raises(errors.InvalidConfigError):
        resolve(["bogus"])
    with pytest.raises(errors.InvalidConfigError):
        resolve([])
