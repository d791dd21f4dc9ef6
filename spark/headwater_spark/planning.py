"""Offset ranges, splitting, rate limiting and Spark's offset JSON: pure logic, no I/O.

An :class:`OffsetRange` is the unit of work of one Spark task: records of one partition with
``start <= offset < end``. A streaming offset (what Spark writes to its checkpoint) is the
JSON object ``{"topic": {"0": next_offset, ...}}``, exactly as Spark's Kafka source writes it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from headwater.client.types import TopicPartition
from headwater.errors import InvalidConfigError

PartitionOffsets = dict[TopicPartition, int]


@dataclass(frozen=True, order=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{tp: n} -> Spark's checkpoint form {"topic": {"partition": n}} (sorted, stable)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_json(doc: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """The inverse of :func:`to_json`; raises InvalidConfigError on a malformed offset."""
    out: PartitionOffsets = {}
    try:
        for topic, parts in doc.items():
            for p, n in parts.items():
                out[TopicPartition(str(topic), int(p))] = int(n)
    except (AttributeError, TypeError, ValueError) as exc:
        raise InvalidConfigError(f"malformed headwater offset {doc!r}: {exc}") from None
    return out


def ranges_between(start: PartitionOffsets, end: PartitionOffsets) -> list[OffsetRange]:
    """One range per partition of ``end`` with records to read (a missing start means 0)."""
    return [
        OffsetRange(tp.topic, tp.partition, start.get(tp, 0), end[tp])
        for tp in sorted(end)
        if end[tp] > start.get(tp, 0)
    ]


def split_ranges(
    ranges: list[OffsetRange], *, min_partitions: int | None, max_records: int | None
) -> list[OffsetRange]:
    """Split ranges so that no piece holds more than ``max_records`` offsets and, when
    ``min_partitions`` exceeds the number of ranges, large ranges are cut into pieces
    proportional to their size (as Spark's KafkaOffsetRangeCalculator). Pieces cover the
    input exactly, in order, without overlap."""
    pieces: list[OffsetRange] = []
    total = sum(r.size for r in ranges)
    want = min_partitions if min_partitions and min_partitions > len(ranges) else None
    for r in ranges:
        n = 1
        if want and total:
            n = max(1, math.floor(r.size / total * want + 0.5))
        if max_records:
            n = max(n, math.ceil(r.size / max_records))
        n = min(n, max(1, r.size))
        step = r.size / n
        bounds = [r.start + round(step * i) for i in range(n)] + [r.end]
        pieces.extend(
            OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds)
        )
    return pieces


def coalesce_ranges(
    ranges: list[OffsetRange],
    *,
    min_records: int | None,
    max_records: int | None,
    min_tasks: int | None,
) -> list[tuple[OffsetRange, ...]]:
    """Group ranges into tasks (minRecordsPerTask): consecutive ranges (in the given order)
    holding fewer than ``min_records`` offsets are packed into one task until it holds at
    least ``min_records``; a range of ``min_records`` or more is a task of its own. A task
    never exceeds ``max_records`` offsets (maxRecordsPerPartition) by packing, and when the
    grouping would leave fewer than ``min_tasks`` tasks (minPartitions) every range stays
    alone. Every range is in exactly one task, in the input order; ``min_records`` None or
    0 leaves each range alone."""
    alone: list[tuple[OffsetRange, ...]] = [(r,) for r in ranges]
    if not min_records:
        return alone
    tasks: list[tuple[OffsetRange, ...]] = []
    group: list[OffsetRange] = []
    held = 0
    for r in ranges:
        if r.size >= min_records:
            tasks.append((r,))
            continue
        if group and max_records and held + r.size > max_records:
            tasks.append(tuple(group))
            group, held = [], 0
        group.append(r)
        held += r.size
        if held >= min_records:
            tasks.append(tuple(group))
            group, held = [], 0
    if group:
        tasks.append(tuple(group))
    if min_tasks and len(tasks) < min(min_tasks, len(ranges)):
        return alone
    return tasks


def rate_limit(
    start: PartitionOffsets, latest: PartitionOffsets, max_rows: int
) -> PartitionOffsets:
    """End offsets admitting at most ``max_rows`` offsets in total, shared among partitions
    in proportion to their backlog (Spark's maxOffsetsPerTrigger). Each partition with a
    backlog advances by at least one offset, so a stream always makes progress."""
    backlog = {tp: max(0, latest[tp] - start.get(tp, 0)) for tp in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, lag in backlog.items():
        begin = start.get(tp, 0)
        if lag == 0:
            out[tp] = max(begin, latest[tp])
            continue
        share = max(1, math.floor(lag / total * max_rows))
        out[tp] = begin + min(lag, share)
    return out
