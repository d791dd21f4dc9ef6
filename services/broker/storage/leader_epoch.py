"""The leader-epoch cache of one partition: which leader epoch started at which offset.

File ``leader-epoch-checkpoint`` in the partition directory (text, replaced atomically:
write ``.tmp``, rename; fsynced as described below), Kafka's format::

    0                      version
    2                      number of entries
    0 0                    epoch start_offset   (ascending in both columns)
    3 1742

An entry ``(e, s)`` says: the first batch written with leader epoch ``e`` has base offset
``s``; epoch ``e`` ends where the next entry starts (or at the log end offset for the last
one). Entries are added by the owning ``Log``:

* when a leader becomes leader (``assign(epoch, log end offset)``) and when it appends the
  first batch of a new epoch;
* when a follower appends a batch whose ``partition_leader_epoch`` is newer than the latest
  entry (the follower copies the leader's history);

and removed with the log: ``truncate_from_end(o)`` drops entries starting at or after ``o``
(log truncation), ``truncate_from_start(o)`` drops entries wholly below the new log start and
moves the one that straddles it up to ``o`` (retention, or a follower restarted at the
leader's log start). ``end_offset_for(epoch)`` is the answer to OffsetForLeaderEpoch, exactly
as Kafka's ``LeaderEpochFileCache.endOffsetFor``.

A missing or unreadable file is not an error: the ``Log`` rebuilds the cache from its batch
headers (every batch carries the epoch it was written in).

Durability (the scheme of Kafka's KAFKA-15046, one step further): a new entry (``assign``)
changes only the memory. The file lags behind it and is brought up to date three ways:
``write_behind`` (the broker's once-a-second flush pass, for every log with a change: one
write, no fsync, however many entries came meanwhile), ``sync`` (the owning ``Log`` calls it
before it moves its recovery point: ``Log.flush``, ``Log.maybe_flush``, clean close; written
and fsynced) and every removal. So a failover's thousands of new leaderships and the
followers' first batches of the new epoch write no file at all. Why losing the newest entries
is safe: an entry missing from the file starts at or after the recovery point the last
``sync`` made durable (entries below it were fsynced first), and after an unclean shutdown
the ``Log`` adds the epochs of the batches past the recovery point from their headers
(``recovery.load_epoch_cache``). What no header can give back is a new leader's entry for an
epoch in which it wrote nothing; such an epoch has no offsets, and the restarted broker is
given a newer epoch by the controller, so no answer depends on it (Kafka loses the same
entry). A process crash keeps what was written (the page cache survives it); after a power
loss the file is the old or the new version, never torn. Removals (``truncate_from_end``,
``truncate_from_start``, ``clear``) are rare and write and fsync at once: an entry the log no
longer has must never come back, and no header could take it away again.

Threads: entries change only under the owning ``Log``'s lock; the file is written under
this cache's own file lock (``write_behind`` runs in the flush pass's thread without the
``Log``'s lock): a write takes the newest entries once it holds the file lock, so the last
write to finish is always of the newest entries it could see, and a removal's write is never
overtaken by an older ``write_behind``. ``close`` ends writing for good (a deleted log's
directory may be taken by a new log of the same name).
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from headwater.errors import KafkaStorageError
from services.broker.storage.fileio import replace_atomically

EPOCH_FILE = "leader-epoch-checkpoint"
VERSION = 0
#: No epoch / no offset (Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET).
UNDEFINED = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


def read_entries(directory: Path) -> list[EpochEntry] | None:
    """The stored entries, or None when the file is missing or damaged (rebuild then)."""
    try:
        lines = (directory / EPOCH_FILE).read_text().split("\n")
        if int(lines[0]) != VERSION:
            return None
        count = int(lines[1])
        entries = []
        for line in lines[2 : 2 + count]:
            e, s = line.split()
            entries.append(EpochEntry(int(e), int(s)))
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    if len(entries) != count or not _ascending(entries):
        return None
    return entries


def _ascending(entries: list[EpochEntry]) -> bool:
    if any(x.epoch < 0 or x.start_offset < 0 for x in entries):
        return False
    return all(
        a.epoch < b.epoch and a.start_offset <= b.start_offset
        for a, b in itertools.pairwise(entries)
    )


def write_entries(directory: Path, entries: Iterable[EpochEntry], *, sync: bool = True) -> None:
    """Atomically replace the file (tmp, rename; with ``sync`` the tmp file and the directory
    are fsynced too); KafkaStorageError on I/O errors."""
    items = list(entries)
    text = f"{VERSION}\n{len(items)}\n" + "".join(f"{x.epoch} {x.start_offset}\n" for x in items)
    try:
        replace_atomically(directory / EPOCH_FILE, text.encode(), sync=sync)
    except OSError as exc:
        raise KafkaStorageError(f"cannot write {EPOCH_FILE} in {directory}: {exc}") from exc


class LeaderEpochCache:
    """Ascending ``(epoch, start_offset)`` entries in memory, and their file written behind
    (see module doc)."""

    def __init__(self, directory: Path, entries: Iterable[EpochEntry] = ()) -> None:
        self.dir = Path(directory)
        self._entries: list[EpochEntry] = list(entries)
        if not _ascending(self._entries):
            raise ValueError(f"epoch entries not ascending: {self._entries}")
        # Versions of the entries: every change adds one; the file holds ``_written``,
        # ``_synced`` of it was fsynced. Entries given here are taken as on disk.
        self._version = 0
        self._written = 0
        self._synced = 0
        self._file_lock = threading.Lock()
        self._closed = False

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED

    @property
    def dirty(self) -> bool:
        """The file lacks entries the memory has (``write_behind`` would write it)."""
        return self._written != self._version

    @property
    def unsynced(self) -> bool:
        """Some entries are not durable yet (``sync`` would write and fsync the file)."""
        return self._synced != self._version

    def _write(self, *, sync: bool, only_if_behind: bool) -> bool:
        """Write the newest entries under the file lock (the version read before the
        entries: a change in between is only written again later); True when written."""
        with self._file_lock:
            if self._closed:
                return False
            version = self._version
            if only_if_behind and version == (self._synced if sync else self._written):
                return False
            write_entries(self.dir, self._entries, sync=sync)
            self._written = version
            if sync:
                self._synced = version
            return True

    def flush(self, *, sync: bool = True) -> None:
        """Write the entries and fsync them (``sync=False``: without the fsyncs, for a new
        log's empty file that its owner makes durable otherwise)."""
        self._write(sync=sync, only_if_behind=False)

    def sync(self) -> None:
        """Make every entry durable (the owning log is about to move its recovery point)."""
        if self.unsynced:
            self._write(sync=True, only_if_behind=True)

    def write_behind(self) -> bool:
        """Write the file without fsync when it lacks entries (the flush pass; needs no
        ``Log`` lock); True when written, False when up to date or closed.
        KafkaStorageError on I/O errors (the entries stay to be written)."""
        if not self.dirty:
            return False
        return self._write(sync=False, only_if_behind=True)

    def close(self) -> None:
        """No more writes (after a running one): the log is closed or deleted."""
        with self._file_lock:
            self._closed = True

    def _change(self, entries: list[EpochEntry]) -> None:
        self._entries = entries
        self._version += 1

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` in memory (the file follows: see
        module doc); True when something changed.

        A no-op when ``epoch`` is already the latest (its start stays the first offset seen).
        Entries that contradict the new one (an epoch >= it, or a start offset > it) are
        removed first, as in Kafka: the log was truncated under them.
        """
        if epoch < 0 or start_offset < 0:
            return False
        last = self._entries[-1] if self._entries else None
        if last is not None and last.epoch == epoch and last.start_offset <= start_offset:
            return False
        kept = [x for x in self._entries if x.epoch < epoch and x.start_offset <= start_offset]
        kept.append(EpochEntry(epoch, start_offset))
        self._change(kept)
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was cut there); written
        and fsynced at once."""
        kept = [x for x in self._entries if x.start_offset < end_offset]
        if len(kept) != len(self._entries):
            self._change(kept)
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop entries wholly below it and move the
        one containing it up to ``start_offset``; written and fsynced at once."""
        starts = [x.start_offset for x in self._entries]
        i = bisect.bisect_right(starts, start_offset) - 1
        if i < 0 or (i == 0 and self._entries[0].start_offset == start_offset):
            return
        self._change([EpochEntry(self._entries[i].epoch, start_offset), *self._entries[i + 1 :]])
        self.flush()

    def clear(self) -> None:
        if self._entries:
            self._change([])
            self.flush()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(largest epoch <= epoch known here, the offset where it ends)``.

        The end of an epoch is the start offset of the next larger one, or the log end
        offset for the latest. ``epoch`` below every entry: ``(epoch, first start offset)``;
        above every entry, undefined or no entries: ``(-1, -1)`` (Kafka's rules).
        """
        if epoch == UNDEFINED or not self._entries:
            return UNDEFINED, UNDEFINED
        if self._entries[-1].epoch == epoch:
            return epoch, log_end_offset
        epochs = [x.epoch for x in self._entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher >= len(self._entries):
            return UNDEFINED, UNDEFINED
        if higher == 0:
            return epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset
