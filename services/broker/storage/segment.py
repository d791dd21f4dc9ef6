"""One log segment: ``<base>.log`` plus its ``<base>.index`` and ``<base>.timeindex``.

It also owns ``<base>.txnindex``, its aborted-transaction index (``txn_index.py``), written
by the log when an ABORT marker in this segment closes a transaction; it goes with the
segment (``delete``).

``<base>`` is the segment's base offset as 20 decimal digits. The log file is record batches
(``headwater.batch.layout``) back to back, exactly as served to consumers: nothing else is
stored. Batch base offsets increase strictly and every batch lies wholly inside the file.

Index entries (see ``offset_index.py`` / ``time_index.py``) are added for a batch when at
least ``index.interval.bytes`` of log were written since the previous entry (never for the
batch at position 0, which a lookup finds by default), so finding an offset reads the
in-memory index and then at most about one interval of batch headers.

Threads: one owner thread calls the mutating methods (``append``, ``recover``, ``load``,
``truncate_to_offset``, ``seal``, ``flush``, ``close``, ``delete``). Readers call ``read``,
``find_position`` and ``find_timestamp`` concurrently, passing the end position they captured
in their snapshot; they never read past it. ``delete`` unlinks the files but leaves the log
file descriptor open until the segment object is garbage collected (``weakref.finalize``), so
a reader that already holds the segment keeps reading the unlinked file. ``close`` closes the
descriptor at once: call it only when no reader can still use the segment (shutdown).
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from headwater.batch.codec import RecordBatch, verify_crc
from headwater.batch.layout import HEADER_SIZE, BatchHeader, parse_header
from headwater.errors import HeadwaterError, KafkaStorageError
from services.broker.storage import fileio, writeback
from services.broker.storage.offset_index import MAX_U32, OffsetIndex
from services.broker.storage.time_index import NO_TIMESTAMP, TimeIndex
from services.broker.storage.txn_index import TxnIndex

log = logging.getLogger(__name__)

#: Bytes read at once when walking batch headers (lookups, tail scans).
SCAN_CHUNK = 16 * 1024
#: Bytes read at once by the recovery scan (reused buffer).
RECOVERY_CHUNK = 8 * 1024 * 1024
#: With a page-cache window set, every this many appended bytes a segment has their writeback
#: started (``writeback.py``).
WRITEBACK_BYTES = 8 * 1024 * 1024
#: 0 (the default): a segment leaves its pages to the kernel's page cache and their writeback
#: to the kernel, as Kafka does, so a reader behind the end reads from memory for as long as
#: the kernel keeps them. N > 0 (``--log-page-cache-window-bytes``, set once at broker start):
#: a segment starts the writeback of what it appends every ``WRITEBACK_BYTES`` and keeps only
#: about its newest N bytes cached on its own account, dropping older pages, written back by
#: then, in steps of ``4 * WRITEBACK_BYTES``; a long-running writer then reuses the pages it
#: frees instead of taking fresh memory each append. That pays only on hosts where fresh
#: memory is slow (VMs that hand freed memory back to their host fault it in at ~0.4 GB/s:
#: docs/storage.md "Write-behind and the page-cache window"), and it costs every reader more
#: than N behind a read from the disk.
PAGE_CACHE_WINDOW_BYTES = 0


def file_names(base_offset: int) -> tuple[str, str, str]:
    """Names of the log, offset index and time index files of a segment."""
    stem = f"{base_offset:020d}"
    return f"{stem}.log", f"{stem}.index", f"{stem}.timeindex"


@dataclass(frozen=True, slots=True)
class BatchMeta:
    """What a segment needs to know about a batch it appends (already patched)."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int


@dataclass(frozen=True, slots=True)
class TimestampMatch:
    """The first record with timestamp >= the one asked for."""

    offset: int
    timestamp: int


class _HeaderReader:
    """Reads batch headers at increasing positions below ``end`` with few ``pread`` calls."""

    __slots__ = ("buf", "end", "fd", "start")

    def __init__(self, fd: int, end: int) -> None:
        self.fd, self.end = fd, end
        self.buf, self.start = b"", 0

    def header_at(self, pos: int) -> BatchHeader | None:
        """The header at ``pos``, or None when fewer than 64 bytes remain before ``end``."""
        if pos + HEADER_SIZE > self.end:
            return None
        if pos < self.start or pos + HEADER_SIZE > self.start + len(self.buf):
            self.buf = os.pread(self.fd, min(SCAN_CHUNK, self.end - pos), pos)
            self.start = pos
            if len(self.buf) < HEADER_SIZE:  # file shrank under us (truncation race)
                return None
        return parse_header(self.buf, pos - self.start)


class LogSegment:
    """A log file and its two indexes (format and thread rules in the module doc)."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
    ) -> None:
        log_name, index_name, time_name = file_names(base_offset)
        self.base_offset = base_offset
        self.log_path = directory / log_name
        self.index_interval_bytes = index_interval_bytes
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._closer = weakref.finalize(self, os.close, self.fd)
        #: Both index files were on disk before this object opened (created) them.
        self.indexes_existed = (directory / index_name).exists() and (
            directory / time_name
        ).exists()
        self.offset_index = OffsetIndex(directory / index_name, base_offset, max_index_bytes)
        self.time_index = TimeIndex(directory / time_name, base_offset, max_index_bytes)
        self.txn_index = TxnIndex(directory, base_offset)
        #: Bytes of valid batches (the writer's view; readers use their snapshot's end).
        self.size = os.fstat(self.fd).st_size
        #: Offset after the last batch (exact for the active segment once loaded).
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        #: When the segment.ms clock started (first append, or first batch's timestamp).
        self.rolling_base_ms: int | None = None
        self.deleted = False
        self._bytes_since_index = 0
        #: Where the next started writeback and the next dropped range begin.
        self._writeback_from = self.size
        self._dropped_to = self.size

    # -- appending ----------------------------------------------------------------------

    def append(
        self, pieces: list[bytes | bytearray | memoryview], metas: list[BatchMeta], now_ms: int
    ) -> None:
        """Write the batches (``pieces`` concatenated) at the end, then index them.

        On an I/O error the file is cut back to its previous size and
        :class:`KafkaStorageError` is raised: nothing of the append stays.
        """
        start = self.size
        saved = (
            len(self.offset_index),
            len(self.time_index),
            self.max_timestamp,
            self.offset_of_max_timestamp,
            self._bytes_since_index,
        )
        try:
            written = fileio.writev_all(self.fd, pieces)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, start)
            raise KafkaStorageError(f"append to {self.log_path} failed: {exc}") from exc
        index_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        pos = start
        for m in metas:
            self._note_batch(
                m.base_offset, m.max_timestamp, m.size, pos, index_entries, time_entries
            )
            pos += m.size
        assert pos == start + written, "batch sizes do not add up to the bytes written"
        try:
            self.offset_index.append_many(index_entries)
            self.time_index.maybe_append_many(time_entries)
        except OSError as exc:
            # Memory first, whatever the files do: an index cuts its entries even when its
            # file cannot be cut (reopened, e.g. EMFILE); that cut is then made at its next use.
            self.max_timestamp, self.offset_of_max_timestamp, self._bytes_since_index = saved[2:]
            with contextlib.suppress(OSError):
                self.offset_index.truncate_to_length(saved[0])
            with contextlib.suppress(OSError):
                self.time_index.truncate_to_length(saved[1])
            try:
                os.ftruncate(self.fd, start)
            except OSError as cut:
                raise KafkaStorageError(
                    f"index write for {self.log_path} failed ({exc}); "
                    f"cutting the log back failed too: {cut}"
                ) from exc
            raise KafkaStorageError(f"index write for {self.log_path} failed: {exc}") from exc
        self.size = pos
        self.next_offset = metas[-1].last_offset + 1
        self._write_behind(start, pos)
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms

    def _note_batch(
        self,
        base_offset: int,
        max_timestamp: int,
        size: int,
        pos: int,
        index_entries: list[tuple[int, int]],
        time_entries: list[tuple[int, int]],
    ) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if pos > 0 and self._bytes_since_index >= self.index_interval_bytes:
            index_entries.append((base_offset, pos))
            time_entries.append((self.max_timestamp, self.offset_of_max_timestamp))
            self._bytes_since_index = 0
        self._bytes_since_index += size

    def can_hold(self, offset: int, extra_bytes: int) -> bool:
        """Whether ``offset`` and ``extra_bytes`` more still fit the u32 index fields."""
        return offset - self.base_offset <= MAX_U32 and self.size + extra_bytes <= MAX_U32

    @property
    def indexes_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def seal(self) -> None:
        """The segment stops being active: record its largest timestamp in the time index
        and release the index descriptors (reopened only if a truncation writes again).
        KafkaStorageError (the segment stays active and unchanged) when the entry cannot be
        written."""
        try:
            self.time_index.maybe_append_many([(self.max_timestamp, self.offset_of_max_timestamp)])
        except OSError as exc:
            raise KafkaStorageError(f"cannot seal {self.log_path}: {exc}") from exc
        self.offset_index.release()
        self.time_index.release()

    # -- loading and recovery -----------------------------------------------------------

    def load(self, next_segment_base: int | None, now_ms: int) -> bool:
        """Cheap load after a clean shutdown (or of a segment below the recovery point).

        Checks both index files (present before open, sizes, monotonicity, bounds, and that
        the last offset-index entry points at a batch with that base offset), then for the
        active segment (``next_segment_base`` None) walks the batch headers after the last
        index entry to find the next offset and largest timestamp. Returns False when anything is
        inconsistent; the caller then runs :meth:`recover`.
        """
        try:
            if not self.indexes_existed or not self.offset_index.load(self.size):
                return False
            last_off, last_pos = self.offset_index.last_entry()
            reader = _HeaderReader(self.fd, self.size)
            first = reader.header_at(0)
            if self.size and first is None:
                return False
            if next_segment_base is not None:
                if last_pos:
                    h = reader.header_at(last_pos)
                    if h is None or h.base_offset != last_off:
                        return False
                if not self.time_index.load(next_segment_base - 1):
                    return False
                self.next_offset = next_segment_base
                ts, off = self.time_index.last_entry()
                self.max_timestamp, self.offset_of_max_timestamp = ts, off
                self.offset_index.release()
                self.time_index.release()
            else:
                if not self._scan_tail(reader, last_off, last_pos):
                    return False
                if not self.time_index.load(self.next_offset - 1):
                    return False
                ts, off = self.time_index.last_entry()
                if ts > self.max_timestamp:
                    self.max_timestamp, self.offset_of_max_timestamp = ts, off
            if first is not None:
                self.rolling_base_ms = min(now_ms, first.max_timestamp)
            return True
        except HeadwaterError:  # any header or CRC check
            return False

    def _scan_tail(self, reader: _HeaderReader, last_off: int, last_pos: int) -> bool:
        pos, expected = last_pos, last_off
        self._bytes_since_index = self.size - last_pos if last_pos else self.size
        self.next_offset = self.base_offset
        while pos < self.size:
            h = reader.header_at(pos)
            if h is None or h.base_offset < expected or pos + h.total_size > self.size:
                return False
            if pos == last_pos and h.base_offset != last_off:
                return False
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.base_offset
            expected = self.next_offset = h.next_offset
            pos += h.total_size
        return True

    def recover(self, *, check_crc: bool = True) -> int:
        """Scan every batch from the start, cut the file at the first bad one, rebuild indexes.

        A batch is bad when its header does not parse, it extends past the end of the file,
        its CRC does not match (``check_crc``), or its base offset is below the previous
        batch's next offset (or the segment's base). Returns the number of bytes cut off.
        KafkaStorageError when the log cannot be cut; an index whose file cannot be written
        (reopened, e.g. EMFILE) is left empty instead (logged; still correct, see below).
        """
        file_size = os.fstat(self.fd).st_size
        buf = bytearray(RECOVERY_CHUNK)
        buf_start, buf_len = 0, 0
        pos, expected = 0, self.base_offset
        index_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self._bytes_since_index = 0
        first_ts: int | None = None
        while pos + HEADER_SIZE <= file_size:
            if pos + HEADER_SIZE > buf_start + buf_len:
                buf_start, buf_len = pos, fileio.pread_into(self.fd, buf, len(buf), pos)
            try:
                h = parse_header(buf, pos - buf_start) if buf_len else None
            except HeadwaterError:  # any header or CRC check
                break
            if h is None or pos + h.total_size > file_size:
                break
            if h.base_offset < expected or h.last_offset - self.base_offset > MAX_U32:
                break
            if check_crc:
                if pos + h.total_size > buf_start + buf_len:
                    if h.total_size > len(buf):
                        buf = bytearray(h.total_size)
                    buf_start, buf_len = pos, fileio.pread_into(self.fd, buf, len(buf), pos)
                try:
                    verify_crc(memoryview(buf)[:buf_len], pos - buf_start, h)
                except HeadwaterError:  # any header or CRC check
                    break
            if first_ts is None:
                first_ts = h.max_timestamp
            self._note_batch(
                h.base_offset, h.max_timestamp, h.total_size, pos, index_entries, time_entries
            )
            expected = h.next_offset
            pos += h.total_size
        cut = file_size - pos
        if cut:
            try:
                os.ftruncate(self.fd, pos)
            except OSError as exc:
                raise KafkaStorageError(f"cannot truncate {self.log_path}: {exc}") from exc
        self.size = pos
        self.next_offset = expected
        for index, entries in ((self.offset_index, index_entries), (self.time_index, time_entries)):
            try:
                index.reset(entries)
            except OSError as exc:
                # the index is left empty (its file cut at its next use): lookups scan the
                # segment from its start, still correct; later entries make it sparse
                log.warning("cannot rebuild %s (left empty): %s", index.path.name, exc)
        self.rolling_base_ms = first_ts
        return cut

    def truncate_to_offset(self, offset: int) -> int:
        """Remove the batch containing ``offset`` and everything after it; new next offset.

        Rescans what remains (no CRC) to rebuild the indexes and the largest timestamp.
        """
        found = self.find_position(offset, self.size)
        if found is not None:
            try:
                os.ftruncate(self.fd, found[0])
            except OSError as exc:
                raise KafkaStorageError(f"cannot truncate {self.log_path}: {exc}") from exc
        self.recover(check_crc=False)
        return self.next_offset

    # -- reading (any thread) -----------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``position`` (``os.pread``; short only at end of file)."""
        return os.pread(self.fd, size, position)

    def find_position(self, offset: int, end: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch below ``end`` whose last offset >= ``offset``.

        Index lookup, then a forward walk over batch headers (about one index interval).
        """
        _, pos = self.offset_index.lookup(offset)
        reader = _HeaderReader(self.fd, end)
        while True:
            h = reader.header_at(pos)
            if h is None:
                return None
            if h.last_offset >= offset:
                return pos, h
            pos += h.total_size

    def headers(self, end: int) -> Iterator[BatchHeader]:
        """Every batch header below position ``end``, in order (no CRC check)."""
        for _, h in self.headers_from(0, end):
            yield h

    def headers_from(self, pos: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every whole batch from ``pos`` to ``end`` (no CRC check)."""
        reader = _HeaderReader(self.fd, end)
        while (h := reader.header_at(pos)) is not None and pos + h.total_size <= end:
            yield pos, h
            pos += h.total_size

    def find_timestamp(self, timestamp: int, min_offset: int, end: int) -> TimestampMatch | None:
        """First record at or after ``min_offset`` with timestamp >= ``timestamp``."""
        start = max(self.time_index.lookup_before(timestamp), min_offset)
        found = self.find_position(start, end)
        if found is None:
            return None
        pos, h = found
        reader = _HeaderReader(self.fd, end)
        while True:
            if h.max_timestamp >= timestamp and h.last_offset >= min_offset:
                batch = RecordBatch(self.read(pos, h.total_size), h, check_crc=False)
                for off, ts in zip(
                    batch.offsets().tolist(), batch.timestamps().tolist(), strict=True
                ):
                    if ts >= timestamp and off >= min_offset:
                        return TimestampMatch(off, ts)
            pos += h.total_size
            nxt = reader.header_at(pos)
            if nxt is None:
                return None
            h = nxt

    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime when no batch carries one."""
        if self.max_timestamp != NO_TIMESTAMP:
            return self.max_timestamp
        try:
            return int(os.fstat(self.fd).st_mtime * 1000)
        except OSError:
            return 0

    # -- lifecycle ----------------------------------------------------------------------

    def _write_behind(self, start: int, end: int) -> None:
        """After an append of ``[start, end)``, with a page-cache window set: have the
        process's writeback thread (``writeback.py``) start the writeback of what was
        appended since the last start and drop what lies more than
        :data:`PAGE_CACHE_WINDOW_BYTES` behind ``end`` (only clean pages can be dropped, so
        the writeback must run ahead of the drops). Without a window (the default) the kernel
        writes dirty pages back when it chooses, as with Kafka: writeback started during a
        burst took CPU and disk from the appends (docs/benchmarks.md "Session 37"). Nothing
        here waits for the disk or the block layer, and a failure changes nothing but the
        cache. The file may have been cut back since the last call: both marks then go on
        from ``start``."""
        if PAGE_CACHE_WINDOW_BYTES <= 0:
            return
        frm = min(self._writeback_from, start)
        back = writeback.NO_RANGE
        if end - frm >= WRITEBACK_BYTES:
            back = (frm, end)
            frm = end
        self._writeback_from = frm
        dropped = min(self._dropped_to, start)
        drop = writeback.NO_RANGE
        behind = end - PAGE_CACHE_WINDOW_BYTES
        if behind - dropped >= 4 * WRITEBACK_BYTES:
            drop = (dropped, behind)
            dropped = behind
        self._dropped_to = dropped
        # No descriptor or thread to spare: skip this hint (the append has happened).
        with contextlib.suppress(OSError, RuntimeError):
            writeback.process_queue().submit(self, self.fd, back, drop)

    def flush(self) -> None:
        try:
            os.fsync(self.fd)
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except OSError as exc:
            raise KafkaStorageError(f"fsync of {self.log_path} failed: {exc}") from exc

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self._closer()

    def delete(self) -> None:
        """Unlink every file; the log fd stays open for readers until GC (module doc)."""
        self.deleted = True
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.log_path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"
