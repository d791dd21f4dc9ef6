"""Partition assignors run by the group leader, by their Kafka wire names.

``range`` and ``roundrobin`` (:mod:`.simple`), ``sticky`` and ``cooperative-sticky``
(:mod:`.sticky`); the consumer protocol codec and shared types are in :mod:`.base`.
"""

from __future__ import annotations

from collections.abc import Iterable

from headwater import errors
from headwater.client.assignors.base import (
    PROTOCOL_TYPE,
    Assignment,
    Assignor,
    MemberAssignment,
    RebalanceProtocol,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from headwater.client.assignors.simple import RangeAssignor, RoundRobinAssignor
from headwater.client.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

ASSIGNORS: dict[str, type[Assignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}


def resolve(names: Iterable[str]) -> list[Assignor]:
    """Assignor instances for ``names`` in preference order; InvalidConfigError otherwise."""
    out: list[Assignor] = []
    for name in names:
        cls = ASSIGNORS.get(name)
        if cls is None:
            raise errors.InvalidConfigError(
                f"unknown partition assignment strategy {name!r}; known: {', '.join(ASSIGNORS)}"
            )
        out.append(cls())
    if not out:
        raise errors.InvalidConfigError("partition_assignment_strategy must not be empty")
    return out


__all__ = [
    "ASSIGNORS",
    "PROTOCOL_TYPE",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberAssignment",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "resolve",
]
