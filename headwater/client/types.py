"""Small value types shared by the producer, consumer and admin client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where one record produced with ``send`` landed (offset -1 with acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """``count`` consecutive records of one ``send_many`` group in one partition."""

    partition: int
    base_offset: int
    count: int


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """Where a ``send_many`` group landed: one range per batch it was split into.

    Ranges are in the order of the group's records for each partition; with acks=0 every
    ``base_offset`` is -1.
    """

    topic: str
    ranges: tuple[PartitionRange, ...]

    @property
    def record_count(self) -> int:
        return sum(r.count for r in self.ranges)


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
