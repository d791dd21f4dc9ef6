"""The sparse time index of one segment: ``<base offset, 20 digits>.timeindex``.

On-disk format: a sequence of 12-byte entries, nothing else::

    offset size field
    0      8    timestamp        int64 LE    ms since the epoch
    8      4    relative_offset  uint32 LE   batch base offset - segment base offset

Entry ``(t, r)`` means "the largest timestamp of every batch up to and including the batch
with base offset ``base + r`` is ``t``" (a running maximum). Timestamps are strictly increasing:
an entry is only appended when the running maximum grew (:meth:`TimeIndex.maybe_append`);
relative offsets are non-decreasing. The segment offers an entry at each offset-index point
and one more when it stops being the active segment, so the last entry of an inactive segment
is the segment's largest timestamp.

To find the first record with timestamp >= ``t``: :meth:`TimeIndex.lookup_before` gives the
offset of the last entry whose timestamp is < ``t`` (no batch up to it can match); the
segment scans forward from there.

Threads: as for the offset index — one writer, concurrent ``lookup_before`` readers that
bound themselves by the offsets column of the tuple they captured.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

import numpy as np

from services.broker.storage import fileio
from services.broker.storage.offset_index import MAX_U32

ENTRY = struct.Struct("<qI")
ENTRY_SIZE = ENTRY.size  # 12
_DTYPE = np.dtype([("ts", "<i8"), ("rel", "<u4")])
assert _DTYPE.itemsize == ENTRY_SIZE
NO_TIMESTAMP = -1


class TimeIndex:
    """Sparse, monotonic map from timestamp to offset (format in the module doc)."""

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // ENTRY_SIZE)
        self._cols: tuple[array[int], array[int]] = (array("q"), array("I"))
        self._file = fileio.LazyFile(path)

    def load(self, max_offset: int | None) -> bool:
        """Read the file into memory; False (and empty) when it is damaged.

        Damaged: size not a multiple of 12, timestamps not strictly increasing, offsets
        decreasing, or an offset above ``max_offset`` (the segment's last offset, when known).
        """
        with self._file.use() as fd:
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0) if size and size % ENTRY_SIZE == 0 else b""
        self._cols = (array("q"), array("I"))
        if size % ENTRY_SIZE:
            return False
        table = np.frombuffer(data, dtype=_DTYPE)
        ts = table["ts"].astype(np.int64)
        rel = table["rel"].astype(np.int64)
        ok = bool(np.all(np.diff(ts) > 0) and np.all(np.diff(rel) >= 0))
        if ok and len(rel) and max_offset is not None:
            ok = int(rel[-1]) <= max_offset - self.base_offset
        if ok:
            t_col, r_col = array("q"), array("I")
            t_col.frombytes(ts.tobytes())
            r_col.frombytes(rel.astype(np.uint32).tobytes())
            self._cols = (t_col, r_col)
        return ok

    # -- writer side --------------------------------------------------------------------

    def maybe_append_many(self, entries: list[tuple[int, int]]) -> None:
        """Append the ``(timestamp, absolute offset)`` entries that raise the maximum. On
        ``OSError`` (raised) neither memory nor the file keeps any of them (the file's cut
        may be pending: ``fileio.LazyFile``)."""
        ts_col, rel_col = self._cols
        n = len(rel_col)
        last_ts = ts_col[len(rel_col) - 1] if len(rel_col) else NO_TIMESTAMP
        last_rel = rel_col[-1] if len(rel_col) else 0
        out = bytearray()
        for ts, offset in entries:
            r = offset - self.base_offset
            if ts <= last_ts:
                continue
            if not (last_rel <= r <= MAX_U32):
                raise ValueError(f"time index offset {offset} out of order in {self.path.name}")
            ts_col.append(ts)
            rel_col.append(r)
            out += ENTRY.pack(ts, r)
            last_ts, last_rel = ts, r
        if out:
            try:
                self._file.append(out, n * ENTRY_SIZE)
            except OSError:
                self._cols = (ts_col[:n], rel_col[:n])
                raise

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset`` (memory and file)."""
        rel_col = self._cols[1]
        self.truncate_to_length(
            bisect.bisect_left(rel_col, offset - self.base_offset, 0, len(rel_col))
        )

    def truncate_to_length(self, n: int) -> None:
        """Keep the first ``n`` entries (a new column tuple: readers keep theirs). Memory is
        cut even when the file cannot be (``OSError`` raised; the cut is then pending)."""
        ts_col, rel_col = self._cols
        self._cols = (ts_col[:n], rel_col[:n])
        self._file.truncate(n * ENTRY_SIZE)

    def reset(self, entries: list[tuple[int, int]]) -> None:
        self._cols = (array("q"), array("I"))
        self._file.truncate(0)
        self.maybe_append_many(entries)

    # -- reader side --------------------------------------------------------------------

    def lookup_before(self, timestamp: int) -> int:
        """Offset of the last entry with timestamp < ``timestamp``, else the base offset."""
        ts_col, rel_col = self._cols
        n = len(rel_col)
        i = bisect.bisect_left(ts_col, timestamp, 0, n)
        if i == 0:
            return self.base_offset
        return self.base_offset + rel_col[i - 1]

    @property
    def max_timestamp(self) -> int:
        """The last entry's timestamp, or -1 when empty."""
        ts_col, rel_col = self._cols
        n = len(rel_col)
        return ts_col[n - 1] if n else NO_TIMESTAMP

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base) when empty."""
        ts_col, rel_col = self._cols
        n = len(rel_col)
        if n == 0:
            return NO_TIMESTAMP, self.base_offset
        return ts_col[n - 1], self.base_offset + rel_col[n - 1]

    def __len__(self) -> int:
        return len(self._cols[1])

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    # -- lifecycle ----------------------------------------------------------------------

    def flush(self) -> None:
        self._file.fsync()

    def release(self) -> None:
        """Close the descriptor until the next write (sealed segments)."""
        self._file.release()

    def close(self) -> None:
        self._file.close()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
