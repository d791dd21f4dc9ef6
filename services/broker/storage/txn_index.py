"""The aborted-transaction index of one segment: ``<base>.txnindex``.

Byte layout (docs/storage.md): a sequence of 32-byte little-endian records, no header::

    0   8  producer_id                 i64
    8   8  first_offset                i64   the transaction's first offset
    16  8  last_offset                 i64   offset of its ABORT marker
    24  8  last_stable_offset_at_abort i64   first unstable offset just after the abort
                                             (the marker's offset + 1 when none is open)

An entry is added to the index of the segment holding the ABORT marker that closed an open
transaction, on leader and follower alike, in marker order (so ``last_offset`` increases
within a file and across the segments of a partition). A partial trailing record (a torn
write) is ignored and cut at the next open.

``last_stable_offset_at_abort`` lets a range query stop early: every transaction still open
at that abort starts at or above it, so once an entry's value exceeds the query's upper
bound no later entry can start at or below it.

Threads: one writer (the log, under its lock) calls :meth:`append`, :meth:`truncate_from`
and :meth:`delete`; readers call :meth:`entries` from any thread: the entries are an
immutable tuple replaced as a whole after each change, so a reader sees a consistent set.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from headwater.errors import KafkaStorageError

ENTRY = struct.Struct("<qqqq")
SUFFIX = ".txnindex"


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def path_for(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}{SUFFIX}"


def read_entries(path: Path) -> list[AbortedTxn]:
    """Every whole record of the file (none when it is missing)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % ENTRY.size
    return [AbortedTxn(*t) for t in ENTRY.iter_unpack(data[:whole])]


class TxnIndex:
    """One segment's aborted-transaction index (file created on the first entry)."""

    __slots__ = ("_entries", "path")

    def __init__(self, directory: Path, base_offset: int) -> None:
        self.path = path_for(directory, base_offset)
        self._entries: tuple[AbortedTxn, ...] = tuple(read_entries(self.path))
        if self.path.exists() and self.path.stat().st_size != len(self._entries) * ENTRY.size:
            self._rewrite(self._entries)  # a torn trailing record

    def entries(self) -> tuple[AbortedTxn, ...]:
        return self._entries

    def append(self, entry: AbortedTxn) -> None:
        try:
            with open(self.path, "ab") as f:
                f.write(ENTRY.pack(*_fields(entry)))
        except OSError as exc:
            raise KafkaStorageError(f"cannot append to {self.path}: {exc}") from exc
        self._entries = (*self._entries, entry)

    def truncate_from(self, offset: int) -> None:
        """Drop entries whose marker is at or above ``offset`` (log truncation, replay)."""
        kept = tuple(e for e in self._entries if e.last_offset < offset)
        if len(kept) != len(self._entries):
            self._rewrite(kept)

    def flush(self) -> None:
        if not self._entries:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise KafkaStorageError(f"fsync of {self.path} failed: {exc}") from exc

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    def _rewrite(self, entries: tuple[AbortedTxn, ...]) -> None:
        try:
            if entries:
                tmp = self.path.with_name(self.path.name + ".tmp")
                tmp.write_bytes(b"".join(ENTRY.pack(*_fields(e)) for e in entries))
                os.replace(tmp, self.path)
            else:
                self.path.unlink(missing_ok=True)
        except OSError as exc:
            raise KafkaStorageError(f"cannot rewrite {self.path}: {exc}") from exc
        self._entries = entries


def write_merged(path: Path, entries: list[AbortedTxn]) -> None:
    """Write ``entries`` as a fresh index file (the cleaner's staged copy); none: no file."""
    if entries:
        path.write_bytes(b"".join(ENTRY.pack(*_fields(e)) for e in entries))


def _fields(e: AbortedTxn) -> tuple[int, int, int, int]:
    return e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset
