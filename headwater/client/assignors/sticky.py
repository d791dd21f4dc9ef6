"""The sticky and cooperative-sticky assignors (Kafka's StickyAssignor and
CooperativeStickyAssignor, KIP-54 / KIP-429).

``sticky`` (eager) computes a *balanced* assignment that keeps as many partitions as possible
with their previous owner:

1. previous owners come from the members' ``owned_partitions`` (the membership code always
   reports the partitions a member held before the rebalance); when two members claim the
   same partition the claim from the highest ``generation_id`` wins (ties: smallest member
   id); claims on partitions that no longer exist or topics the member no longer subscribes
   to are dropped;
2. every unclaimed partition goes to the least-loaded member subscribed to its topic;
3. while some member holds at least two partitions more than another member that could take
   one of them, one partition moves from the most to the least loaded (preferring one that
   the receiver owned before, then one new to the giver). Each move lowers the sum of squared
   loads, so this ends; at the end no single move can improve balance. With identical
   subscriptions, loads differ by at most one.

``cooperative-sticky`` computes the same target and then removes from it every partition
whose current owner (the highest-generation claim, whatever the claimant now subscribes to)
is another member: that owner finds the partition missing from its assignment and revokes
it, rejoins, and the next rebalance hands it to the target. A partition is therefore never
assigned to one member while another still owns it, and partitions that do not move stay
with their owner through the whole rebalance.
"""

from __future__ import annotations

from collections.abc import Mapping

from headwater.client.assignors.base import (
    Assignment,
    RebalanceProtocol,
    Subscription,
    all_partitions,
)
from headwater.client.types import TopicPartition


def current_owners(members: Mapping[str, Subscription]) -> dict[TopicPartition, str]:
    """Owner of each claimed partition: the claim with the highest generation wins."""
    best: dict[TopicPartition, tuple[int, str]] = {}
    for m in sorted(members):
        sub = members[m]
        for tp in sub.owned_partitions:
            cur = best.get(tp)
            if cur is None or sub.generation_id > cur[0]:
                best[tp] = (sub.generation_id, m)
    return {tp: m for tp, (_, m) in best.items()}


def sticky_assign(
    members: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> Assignment:
    """The balanced, sticky target (see the module docstring)."""
    parts = all_partitions(members, partition_counts)
    valid = set(parts)
    owners = {
        tp: m
        for tp, m in current_owners(members).items()
        if tp in valid and tp.topic in members[m].topics
    }
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for tp in parts:
        if tp in owners:
            out[owners[tp]].append(tp)
    for tp in parts:
        if tp in owners:
            continue
        eligible = [m for m in members if tp.topic in members[m].topics]
        dst = min(eligible, key=lambda m: (len(out[m]), m))
        out[dst].append(tp)
    _balance(members, out, owners)
    return {m: sorted(tps) for m, tps in out.items()}


def _balance(
    members: Mapping[str, Subscription],
    out: dict[str, list[TopicPartition]],
    owners: Mapping[TopicPartition, str],
) -> None:
    while True:
        moved = False
        for src in sorted(members, key=lambda m: (-len(out[m]), m)):
            receivers = sorted(
                (m for m in members if len(out[m]) <= len(out[src]) - 2),
                key=lambda m: (len(out[m]), m),
            )
            for dst in receivers:
                movable = [tp for tp in out[src] if tp.topic in members[dst].topics]
                if not movable:
                    continue
                tp = min(
                    movable,
                    key=lambda t: (
                        owners.get(t) != dst,  # back to its previous owner first
                        owners.get(t) == src,  # then one the giver did not own before
                        -t.partition,
                        t.topic,
                    ),
                )
                out[src].remove(tp)
                out[dst].append(tp)
                moved = True
                break
            if moved:
                break
        if not moved:
            return


class StickyAssignor:
    name = "sticky"
    protocol = RebalanceProtocol.EAGER

    def assign(
        self, members: Mapping[str, Subscription], partition_counts: Mapping[str, int]
    ) -> Assignment:
        return sticky_assign(members, partition_counts)


class CooperativeStickyAssignor:
    name = "cooperative-sticky"
    protocol = RebalanceProtocol.COOPERATIVE

    def assign(
        self, members: Mapping[str, Subscription], partition_counts: Mapping[str, int]
    ) -> Assignment:
        target = sticky_assign(members, partition_counts)
        owners = current_owners(members)
        return {m: [tp for tp in tps if owners.get(tp, m) == m] for m, tps in target.items()}
