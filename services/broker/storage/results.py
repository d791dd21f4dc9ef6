"""Value types returned by ``Log`` and the read snapshot it publishes to readers."""

from __future__ import annotations

from dataclasses import dataclass

from headwater.batch.layout import HEADER_SIZE, BatchHeader, parse_header
from headwater.errors import HeadwaterError
from services.broker.storage.segment import LogSegment


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Result of :meth:`Log.append`: the offsets assigned and what was stamped."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    #: The broker's timestamp when the topic uses LogAppendTime, else -1.
    log_append_time: int
    log_start_offset: int
    record_count: int
    size_bytes: int
    #: Every batch of the call was a duplicate of one already in the log: nothing was
    #: written and the offsets are the originals'.
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchSlice:
    """Whole batches read from the log: ``data`` holds batches ``[first_offset, next_offset)``.

    ``first_offset`` is the base offset of the first batch (it may be below the offset asked
    for: a batch is never split); empty ``data`` has ``first_offset == next_offset``.
    """

    data: bytes
    first_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one reader sees: immutable, replaced as a whole after every mutation."""

    segments: tuple[LogSegment, ...]
    bases: tuple[int, ...]
    #: Byte size of each segment except the last (sealed segments do not grow).
    sealed_ends: tuple[int, ...]
    active_end: int
    log_start_offset: int
    log_end_offset: int


def read_batches(
    seg: LogSegment, pos: int, first: BatchHeader, end: int, max_bytes: int, limit: int
) -> FetchSlice:
    """Read whole batches at ``pos`` (the first one always, then while within max_bytes)."""
    want = min(max(max_bytes, first.total_size), end - pos)
    data = seg.read(pos, want)
    p, nxt = 0, first.base_offset
    while p + HEADER_SIZE <= len(data):
        try:
            h = parse_header(data, p)
        except HeadwaterError:  # any header or CRC check
            break
        if p + h.total_size > len(data) or h.base_offset >= limit:
            break
        p += h.total_size
        nxt = h.next_offset
    if p < len(data):
        data = data[:p]
    return FetchSlice(data, first.base_offset, nxt)
