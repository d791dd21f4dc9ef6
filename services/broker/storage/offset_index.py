"""The sparse offset index of one segment: ``<base offset, 20 digits>.index``.

On-disk format: a sequence of 8-byte entries, nothing else (no header)::

    offset size field
    0      4    relative_offset  uint32 LE   batch base offset - segment base offset
    4      4    position         uint32 LE   byte position of that batch in the .log file

Entry ``(r, p)`` means "the batch at byte ``p`` of the log file has base offset
``segment base + r``". Entries are strictly increasing in both fields and sparse: the
segment adds one roughly every ``index.interval.bytes`` of log. A lookup returns the last
entry whose offset is <= the target; the caller scans forward from its position over batch
headers (at most about one index interval of bytes), so finding an offset is O(log entries)
in memory plus O(1) reads, independent of the log size.

The entries live in memory (two ``array('I')`` columns) and are appended to the file in one
``os.write`` per append call; the file is only read at load time. A missing, truncated,
non-monotonic or out-of-range file is reported as damaged by :meth:`OffsetIndex.load` and the
segment rebuilds it from the log (see ``segment.py``).

Threads: one writer (the segment's owner) calls ``append``/``truncate``/``reset``; readers
call ``lookup`` concurrently. Both columns are held in one tuple that ``truncate``/``reset``
replace as a whole, and ``append`` grows the offsets column before the positions column, so a
reader that bounds itself by ``len(positions)`` of the tuple it captured never sees a torn entry.
"""

from __future__ import annotations

import bisect
import os
import struct
import sys
from array import array
from pathlib import Path

import numpy as np

from services.broker.storage import fileio

ENTRY = struct.Struct("<II")
ENTRY_SIZE = ENTRY.size  # 8
MAX_U32 = 0xFFFFFFFF

assert array("I").itemsize == 4


def _u32_array(data: bytes, stride: int, field: int) -> array[int]:
    """Column ``field`` (u32 index) of fixed-size little-endian records in ``data``."""
    words = array("I")
    words.frombytes(data)
    if sys.byteorder != "little":
        words.byteswap()
    return words[field :: stride // 4]


class OffsetIndex:
    """Sparse map from offset to log position for one segment (format in the module doc)."""

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // ENTRY_SIZE)
        self._cols: tuple[array[int], array[int]] = (array("I"), array("I"))
        self._file = fileio.LazyFile(path)

    # -- loading ------------------------------------------------------------------------

    def load(self, log_size: int) -> bool:
        """Read the file into memory; False (and empty) when it is damaged.

        Damaged: size not a multiple of 8, offsets or positions not strictly increasing,
        a position at or beyond ``log_size``, or a first entry at position 0 (which the
        writer never produces). The caller rebuilds a damaged index from the log.
        """
        with self._file.use() as fd:
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0) if size and size % ENTRY_SIZE == 0 else b""
        if size % ENTRY_SIZE:
            self._cols = (array("I"), array("I"))
            return False
        table = np.frombuffer(data, dtype="<u4").reshape(-1, 2).astype(np.int64)
        ok = bool(np.all(np.diff(table, axis=0) > 0))
        if ok and len(table) and (table[0, 1] == 0 or int(table[-1, 1]) >= log_size):
            ok = False
        rel = _u32_array(data, ENTRY_SIZE, 0)
        pos = _u32_array(data, ENTRY_SIZE, 1)
        self._cols = (rel, pos) if ok else (array("I"), array("I"))
        return ok

    # -- writer side --------------------------------------------------------------------

    def append_many(self, entries: list[tuple[int, int]]) -> None:
        """Append ``(absolute offset, position)`` entries, both strictly increasing.

        Memory first (readers may use them at once: the positions are already written to
        the log), then one write to the file. On ``OSError`` (raised) neither keeps any of
        them (the file's cut may be pending: ``fileio.LazyFile``).
        """
        if not entries:
            return
        rel, pos = self._cols
        n = len(pos)
        last_rel = rel[-1] if len(pos) else -1
        last_pos = pos[-1] if len(pos) else -1
        out = bytearray()
        for offset, position in entries:
            r = offset - self.base_offset
            if not (last_rel < r <= MAX_U32 and last_pos < position <= MAX_U32):
                raise ValueError(
                    f"index entry ({offset}, {position}) out of order or range after "
                    f"({self.base_offset + last_rel}, {last_pos}) in {self.path.name}"
                )
            rel.append(r)
            pos.append(position)
            out += ENTRY.pack(r, position)
            last_rel, last_pos = r, position
        try:
            self._file.append(out, n * ENTRY_SIZE)
        except OSError:
            self._cols = (rel[:n], pos[:n])
            raise

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset`` (memory and file)."""
        rel, pos = self._cols
        self.truncate_to_length(bisect.bisect_left(rel, offset - self.base_offset, 0, len(pos)))

    def truncate_to_length(self, n: int) -> None:
        """Keep the first ``n`` entries (a new column tuple: readers keep theirs). Memory is
        cut even when the file cannot be (``OSError`` raised; the cut is then pending)."""
        rel, pos = self._cols
        self._cols = (rel[:n], pos[:n])
        self._file.truncate(n * ENTRY_SIZE)

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace everything with ``entries`` (used after a rebuild scan)."""
        self._cols = (array("I"), array("I"))
        self._file.truncate(0)
        self.append_many(entries)

    # -- reader side --------------------------------------------------------------------

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= ``offset``; else (base, 0)."""
        rel, pos = self._cols
        n = len(pos)
        i = bisect.bisect_right(rel, offset - self.base_offset, 0, n)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + rel[i - 1], pos[i - 1]

    def last_entry(self) -> tuple[int, int]:
        """The last entry, or (base, 0) when empty."""
        rel, pos = self._cols
        n = len(pos)
        if n == 0:
            return self.base_offset, 0
        return self.base_offset + rel[n - 1], pos[n - 1]

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
        """Close and unlink; the in-memory entries stay usable by readers holding them."""
        self.close()
        self.path.unlink(missing_ok=True)
