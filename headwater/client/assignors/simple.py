"""The range and round-robin assignors (Kafka's RangeAssignor / RoundRobinAssignor).

Both are eager and stateless: they ignore owned partitions.

* ``range``: per topic, the members subscribed to it are sorted (by group instance id when
  set, so static members keep their slot, else by member id) and each takes a contiguous
  run of partitions; the first ``count % members`` take one extra.
* ``roundrobin``: every partition of every subscribed topic, sorted by (topic, partition),
  is dealt in turn to the members sorted by id, skipping members not subscribed to its topic.
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


def _sort_key(member_id: str, sub: Subscription) -> tuple[int, str, str]:
    # static members first, in instance-id order, then dynamic ones by member id (KIP-345)
    if sub.group_instance_id:
        return (0, sub.group_instance_id, member_id)
    return (1, member_id, member_id)


class RangeAssignor:
    name = "range"
    protocol = RebalanceProtocol.EAGER

    def assign(
        self, members: Mapping[str, Subscription], partition_counts: Mapping[str, int]
    ) -> Assignment:
        out: Assignment = {m: [] for m in members}
        topics = sorted({t for s in members.values() for t in s.topics if t in partition_counts})
        for topic in topics:
            consumers = sorted(
                (m for m, s in members.items() if topic in s.topics),
                key=lambda m: _sort_key(m, members[m]),
            )
            n = partition_counts[topic]
            per, extra = divmod(n, len(consumers))
            start = 0
            for i, m in enumerate(consumers):
                length = per + (1 if i < extra else 0)
                out[m].extend(TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return out


class RoundRobinAssignor:
    name = "roundrobin"
    protocol = RebalanceProtocol.EAGER

    def assign(
        self, members: Mapping[str, Subscription], partition_counts: Mapping[str, int]
    ) -> Assignment:
        out: Assignment = {m: [] for m in members}
        order = sorted(members)
        if not order:
            return out
        i = 0
        for tp in all_partitions(members, partition_counts):
            for _ in range(len(order)):
                m = order[i % len(order)]
                i += 1
                if tp.topic in members[m].topics:
                    out[m].append(tp)
                    break
        return out
