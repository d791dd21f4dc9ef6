"""Shared vocabulary of the partition assignors and the embedded consumer protocol codec.

An assignor is a pure function run by the group leader: from every member's subscription
(``ConsumerSubscription``: topics, the partitions it owns, the generation they came from,
opaque user data) and the partition count of every subscribed topic, it returns the
partitions each member gets. Assignors do no I/O and keep no state between calls; the
membership code (:mod:`headwater.client.group`) serialises subscriptions into
``JoinGroupProtocol.metadata`` and assignments into ``SyncGroupAssignment.assignment``
with :func:`encode_subscription` / :func:`encode_assignment` and back.

Protocols: ``EAGER`` assignors expect every member to give up all of its partitions before
joining (stop-the-world); ``COOPERATIVE`` ones never hand a member a partition that another
member still owns in the same round (KIP-429), so members keep unaffected partitions.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from headwater import errors
from headwater.client.types import TopicPartition
from headwater.v1 import coordinator_pb2

PROTOCOL_TYPE = "consumer"

Assignment = dict[str, list[TopicPartition]]


class RebalanceProtocol(enum.Enum):
    EAGER = "eager"
    COOPERATIVE = "cooperative"


@dataclass(frozen=True)
class Subscription:
    """One member's decoded ``ConsumerSubscription`` (plus its static instance id)."""

    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    user_data: bytes = b""
    group_instance_id: str = ""


@dataclass(frozen=True)
class MemberAssignment:
    """A decoded ``ConsumerAssignment``."""

    partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes = field(default=b"")


class Assignor(Protocol):
    """A partition assignor: ``name`` is the wire name voted on in JoinGroup."""

    name: str
    protocol: RebalanceProtocol

    def assign(
        self, members: Mapping[str, Subscription], partition_counts: Mapping[str, int]
    ) -> Assignment: ...


def _group(tps: Iterable[TopicPartition]) -> list[coordinator_pb2.TopicPartitions]:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [
        coordinator_pb2.TopicPartitions(topic=t, partitions=sorted(ps))
        for t, ps in sorted(by_topic.items())
    ]


def _ungroup(items: Iterable[coordinator_pb2.TopicPartitions]) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(t.topic, int(p)) for t in items for p in t.partitions)


def encode_subscription(sub: Subscription) -> bytes:
    msg = coordinator_pb2.ConsumerSubscription(
        topics=sorted(sub.topics),
        owned_partitions=_group(sub.owned_partitions),
        user_data=sub.user_data,
        generation_id=sub.generation_id,
    )
    return bytes(msg.SerializeToString())


def decode_subscription(data: bytes, group_instance_id: str = "") -> Subscription:
    msg = coordinator_pb2.ConsumerSubscription()
    try:
        msg.ParseFromString(data)
    except Exception as exc:  # protobuf raises its own DecodeError
        raise errors.InconsistentGroupProtocolError(f"bad ConsumerSubscription: {exc}") from exc
    return Subscription(
        topics=tuple(msg.topics),
        owned_partitions=_ungroup(msg.owned_partitions),
        generation_id=msg.generation_id,
        user_data=bytes(msg.user_data),
        group_instance_id=group_instance_id,
    )


def encode_assignment(partitions: Iterable[TopicPartition], user_data: bytes = b"") -> bytes:
    msg = coordinator_pb2.ConsumerAssignment(partitions=_group(partitions), user_data=user_data)
    return bytes(msg.SerializeToString())


def decode_assignment(data: bytes) -> MemberAssignment:
    msg = coordinator_pb2.ConsumerAssignment()
    try:
        msg.ParseFromString(data)
    except Exception as exc:
        raise errors.InconsistentGroupProtocolError(f"bad ConsumerAssignment: {exc}") from exc
    return MemberAssignment(_ungroup(msg.partitions), bytes(msg.user_data))


def all_partitions(
    members: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> list[TopicPartition]:
    """Every partition of every topic some member subscribes to (unknown topics skipped),
    sorted by topic then partition."""
    topics = sorted({t for s in members.values() for t in s.topics if t in partition_counts})
    return [TopicPartition(t, p) for t in topics for p in range(partition_counts[t])]
