"""Reading a partition's log: batches from an offset, offset by timestamp, the offsets and
sizes, and the producer-state queries. Any thread, no lock (except ``producer_entry``).

Each call captures the immutable read :class:`~services.broker.storage.results.Snapshot`
once (segments tuple, their end positions, log start and end offsets) and never reads past
it, so it sees a consistent prefix of the log (``log.py`` module doc, concurrency contract).
"""

from __future__ import annotations

import bisect

from headwater.errors import OffsetOutOfRangeError
from services.broker.storage.log_state import LogState
from services.broker.storage.producer_state import ProducerEntry
from services.broker.storage.results import FetchSlice, Snapshot, read_batches
from services.broker.storage.segment import TimestampMatch


class LogReads(LogState):
    """The read side of :class:`~services.broker.storage.log.Log` (see module doc)."""

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FetchSlice:
        """Whole batches from the one containing ``offset``, about ``max_bytes`` of them.

        Stops before a batch whose base offset is >= ``max_offset`` (the high watermark for
        consumers) and at the end of the segment; returns at least one batch, however large,
        when one is visible. Empty at the log end (or at/after ``max_offset``). In a
        compacted log an offset inside a removed range reads from the next batch. Raises
        OffsetOutOfRangeError when ``offset`` is below the log start or above the log end.
        """
        snap = self._snap
        if offset < snap.log_start_offset or offset > snap.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{snap.log_start_offset}, {snap.log_end_offset}]"
            )
        limit = snap.log_end_offset if max_offset is None else min(max_offset, snap.log_end_offset)
        # max(0): compaction may have removed whole segments at the start of the log
        i = max(0, bisect.bisect_right(snap.bases, offset) - 1)
        last = len(snap.segments) - 1
        while offset < limit and 0 <= i <= last:
            seg = snap.segments[i]
            end = snap.active_end if i == last else snap.sealed_ends[i]
            found = seg.find_position(offset, end)
            if found is None:
                i += 1
                continue
            pos, h = found
            if h.base_offset >= limit:
                break
            return read_batches(seg, pos, h, end, max_bytes, limit)
        return FetchSlice(b"", offset, offset)

    def tail_bytes_from(self, offset: int) -> int | None:
        """At least the bytes :meth:`read` would cover from ``offset`` to the log end, from
        the in-memory offset index (no I/O): the active segment's end minus the position of
        its last index entry at or below ``offset``. None when ``offset`` is outside the
        active segment (a sealed segment's read is not a read of the tail)."""
        snap = self._snap
        if not snap.segments or not snap.bases[-1] <= offset <= snap.log_end_offset:
            return None
        _, pos = snap.segments[-1].offset_index.lookup(offset)
        return snap.active_end - pos

    def offset_for_timestamp(self, timestamp: int) -> TimestampMatch | None:
        """The first record (offset, timestamp) with timestamp >= ``timestamp``, or None."""
        snap = self._snap
        last = len(snap.segments) - 1
        for i, seg in enumerate(snap.segments):
            if seg.max_timestamp < timestamp:
                continue
            end = snap.active_end if i == last else snap.sealed_ends[i]
            found = seg.find_timestamp(timestamp, snap.log_start_offset, end)
            if found is not None and found.offset < snap.log_end_offset:
                return found
        return None

    @property
    def log_start_offset(self) -> int:
        return self._snap.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._snap.log_end_offset

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def num_segments(self) -> int:
        return len(self._snap.segments)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    def segment_base_offsets(self) -> list[int]:
        return list(self._snap.bases)

    def snapshot(self) -> Snapshot:
        """The current read snapshot (the cleaner reads sealed segments through it)."""
        return self._snap

    @property
    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an open transaction; None when none is open (any
        thread)."""
        return self._producers.first_unstable_offset

    def producer_entry(self, producer_id: int) -> ProducerEntry | None:
        """A copy of the partition's state for ``producer_id``, or None."""
        with self._lock:
            return self._producers.entry(producer_id)

    def aborted_transactions(self, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of every aborted transaction with first_offset <=
        ``end_offset`` and last_offset (its ABORT marker) >= ``start_offset``, ascending by
        first offset. Reads the txnindex of the segment holding ``start_offset`` and the
        later ones through the read snapshot (no lock, any thread); stops at an entry
        whose last stable offset is past ``end_offset`` (``txn_index`` doc)."""
        snap = self._snap
        i = max(0, bisect.bisect_right(snap.bases, start_offset) - 1)
        found: list[tuple[int, int]] = []
        for seg in snap.segments[i:]:
            for e in seg.txn_index.entries():
                if e.last_offset >= start_offset and e.first_offset <= end_offset:
                    found.append((e.first_offset, e.producer_id))
                if e.last_stable_offset > end_offset:
                    break
            else:
                continue
            break
        return [(pid, first) for first, pid in sorted(found)]
