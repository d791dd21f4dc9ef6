"""One partition's log: the directory ``<topic>-<partition>`` of segments.

Layout of the directory::

    00000000000000000000.log / .index / .timeindex   one segment per base offset
    00000000000000052311.log / .index / .timeindex   (the last one is the active segment)
    00000000000000052311.txnindex                   aborted transactions (``txn_index.py``)
    00000000000000052311.snapshot                   producer state (``producer_snapshot.py``)
    partition.checkpoint                            log start offset, recovery point
    cleaner.checkpoint                              compacted topics: first uncleaned offset
    .cleaned-<base>-<end>/, .swap-<base>-<end>/     compaction staging (``swap.py``)
    .clean_shutdown                                 present only while the log is closed cleanly

Offsets are assigned here: each appended batch gets ``base_offset`` = the log end offset
(LEO) and the LEO advances by ``last_offset_delta + 1``. They are dense when written; log
compaction (``cleaner.py``) later removes records but never changes an offset, so a cleaned
log has gaps, and a follower copying a cleaned leader log writes the same gaps. Segments
are ordered by base offset; a segment's batches all lie in ``[its base, next segment's base)``.

Concurrency contract:

* Mutations (``append``, ``roll``, ``truncate_to``, ``truncate_fully_and_start_at``,
  ``delete_retention``, ``flush``, ``maybe_flush``, ``update_config``, ``close``, ``delete``)
  are serialised by an internal lock; the broker still has one owner per partition so that
  appends keep their order. They may block on disk I/O: call them off the event loop.
* ``read`` and ``offset_for_timestamp`` take no lock and may run in any number of threads at
  once. Each call captures the immutable :class:`Snapshot` once (segments tuple, their end
  positions, log start and end offsets) and never reads past it, so it sees a consistent
  prefix of the log. A segment removed by retention stays readable through the snapshots
  that hold it: its files are unlinked, but its log file descriptor is closed only when the
  last reference goes (``LogSegment`` module doc). ``truncate_to`` shortens files in place;
  a reader racing with it may get fewer batches than its snapshot promised (never a partial
  batch), which is why truncation below the high watermark must only happen on followers.
* ``replace_segments`` (the cleaner) swaps a run of sealed segments for their cleaned copy
  under the lock, in one snapshot change: readers holding the old segments keep reading
  their unlinked files. The cleaner itself reads the sealed segments without the lock.
* ``close`` closes descriptors at once: stop readers first.

Producer state (docs/transactions.md): the log owns the partition's
:class:`~services.broker.storage.producer_state.ProducerStateManager`. ``append`` checks
idempotent/transactional batches against it before writing and drops duplicates;
``append_as_follower`` applies every batch unchecked; ``append_control`` writes markers.
Snapshots are written at each roll and at clean close; open and truncation rebuild the
state and the aborted-transaction indexes (``producer_recovery.py``).
``first_unstable_offset`` and ``aborted_transactions`` may be called from any thread.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from headwater.batch.codec import now_ms, verify_crc
from headwater.batch.control import encode_control_batch
from headwater.batch.layout import ATTR_CONTROL, BatchHeader, parse_header
from headwater.config import TopicConfig
from headwater.errors import (
    InvalidRequestError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from services.broker.storage import (
    appending,
    checkpoint,
    fileio,
    producer_recovery,
    producer_snapshot,
    recovery,
    swap,
    txn_index,
)
from services.broker.storage.leader_epoch import LeaderEpochCache
from services.broker.storage.producer_state import ProducerEntry, ProducerStateManager
from services.broker.storage.results import AppendInfo, FetchSlice, Snapshot, read_batches
from services.broker.storage.segment import LogSegment, TimestampMatch

Clock = Callable[[], int]
Buffer = bytes | bytearray | memoryview
# append modes
_LEADER, _FOLLOWER, _CONTROL = 0, 1, 2


class Log:
    """A partition's segments, offsets, retention, flushing and recovery (see module doc)."""

    def __init__(self, directory: Path, config: TopicConfig, *, clock: Clock = now_ms) -> None:
        self.dir = Path(directory)
        self.config = config
        self._clock = clock
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._sealed_unflushed: list[LogSegment] = []
        self._leo = 0
        self._log_start = 0
        self._recovery_point = 0
        self._size = 0
        self._unflushed_records = 0
        self._first_unflushed_ms: int | None = None
        self._written_checkpoint: checkpoint.Checkpoint | None = None
        self._closed = False
        #: Bumped by every mutation that removes or rewrites sealed data (truncation,
        #: retention, a cleaner swap): the cleaner installs its work only if it is unchanged.
        self.structure_version = 0
        #: Bytes cut off by recovery when this log was opened (0 after a clean shutdown).
        self.recovered_bytes_truncated = 0
        self._snap: Snapshot
        #: (epoch, start offset) history; changed only under ``_lock`` (leader_epoch.py).
        self.epochs: LeaderEpochCache
        #: Producer state as of the log end; changed only under ``_lock``.
        self._producers = ProducerStateManager()
        #: Snapshot offset the last rebuild started from (None: none) and batches replayed.
        self.producer_snapshot_offset: int | None = None
        self.producer_replayed_batches = 0
        self._load()

    # -- loading ------------------------------------------------------------------------

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
        )

    def _load(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        swap.recover(self.dir)  # finish committed cleaner swaps, discard uncommitted ones
        clean = checkpoint.take_clean_shutdown(self.dir)
        cp = checkpoint.read_checkpoint(self.dir)
        bases = sorted(
            int(p.stem) for p in self.dir.glob("*.log") if len(p.stem) == 20 and p.stem.isdigit()
        )
        strays = [*self.dir.glob("*.index"), *self.dir.glob("*.timeindex")]
        for stray in [*strays, *self.dir.glob(f"*{txn_index.SUFFIX}")]:
            if not stray.stem.isdigit() or int(stray.stem) not in bases:
                stray.unlink()
        recovery_point = cp.recovery_point if cp else 0
        now = self._clock()
        segs, cut = recovery.recover_segments(
            [self._new_segment(b) for b in bases],
            clean=clean,
            recovery_point=recovery_point,
            now=now,
        )
        self.recovered_bytes_truncated += cut
        if not segs:
            segs = [self._new_segment(cp.log_start_offset if cp else 0)]
        self._segments = segs
        self._leo = segs[-1].next_offset
        self._size = sum(s.size for s in segs)
        start = cp.log_start_offset if cp else 0
        self._log_start = min(max(start, segs[0].base_offset), self._leo)
        self._recovery_point = min(recovery_point, self._leo)
        self._publish(structure_changed=True)
        self._write_checkpoint()
        self.epochs = recovery.load_epoch_cache(
            self.dir, segs, log_start=self._log_start, log_end=self._leo
        )
        self._rebuild_producer_state()

    def _rebuild_producer_state(self) -> None:
        """State as of the log end from the newest snapshot <= it plus a header replay."""
        try:
            done = producer_recovery.rebuild(self.dir, self._segments, self._leo)
        except OSError as exc:
            raise KafkaStorageError(f"cannot rebuild producer state in {self.dir}: {exc}") from exc
        self._producers = done.state
        self.producer_snapshot_offset = done.snapshot_offset
        self.producer_replayed_batches = done.replayed_batches

    def _write_producer_snapshot(self, *, sync: bool) -> None:
        entries = list(self._producers.entries.values())
        try:
            producer_snapshot.write(self.dir, self._leo, entries, sync=sync)
        except OSError as exc:
            raise KafkaStorageError(f"cannot write producer snapshot in {self.dir}: {exc}") from exc

    # -- snapshot -----------------------------------------------------------------------

    def _publish(self, *, structure_changed: bool = False) -> None:
        """Install a new read snapshot (after every mutation; caller holds the lock)."""
        segs = self._segments
        if structure_changed:
            seg_tuple = tuple(segs)
            bases = tuple(s.base_offset for s in segs)
            ends = tuple(s.size for s in segs[:-1])
        else:
            old = self._snap
            seg_tuple, bases, ends = old.segments, old.bases, old.sealed_ends
        self._snap = Snapshot(seg_tuple, bases, ends, segs[-1].size, self._log_start, self._leo)

    # -- appending ----------------------------------------------------------------------

    def append(
        self,
        buf: Buffer,
        batches: Sequence[tuple[int, BatchHeader]],
        leader_epoch: int,
        *,
        log_append_time: int | None = None,
    ) -> AppendInfo:
        """Assign offsets to ``batches`` (validated, positions in ``buf``) and write them.

        Each batch's 64-byte header is copied, patched (base offset, leader epoch) and
        written followed by a view of the rest of the batch: the records are never copied.
        With ``message.timestamp.type=LogAppendTime`` each batch is copied once and stamped
        with ``log_append_time`` (default: the clock). Rolls first when the active segment
        is full by size, age or index. The first batch of a new ``leader_epoch`` adds an
        epoch-cache entry. Raises InvalidRequestError (nothing written) when ``batches`` is
        empty, does not lie inside ``buf`` or holds a control batch; KafkaStorageError on
        I/O errors (nothing written).

        Batches with ``producer_id >= 0`` are first checked in order against the producer
        state (docs/transactions.md rules 1-5): InvalidProducerEpochError,
        OutOfOrderSequenceNumberError, UnknownProducerIdError or InvalidTxnStateError,
        nothing written. Duplicates are not written: when every batch is one, the result
        carries their original offsets and ``duplicate=True``; otherwise only the new
        batches are written.
        """
        return self._append(buf, batches, leader_epoch, log_append_time, _LEADER)

    def append_if_uncontended(
        self, buf: Buffer, batches: Sequence[tuple[int, BatchHeader]], leader_epoch: int
    ) -> AppendInfo | None:
        """:meth:`append` now, or None (nothing done) when it could block the caller: another
        thread holds the log (a flush pass fsyncing, the cleaner swapping segments,
        retention) or the append would write a new leader-epoch entry (a file + fsync).
        For small appends on the event loop (services/broker/partition.py)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self.epochs.latest_epoch != leader_epoch:
                return None
            return self.append(buf, batches, leader_epoch)
        finally:
            self._lock.release()

    def append_as_follower(
        self, buf: Buffer, batches: Sequence[tuple[int, BatchHeader]]
    ) -> AppendInfo:
        """Append a leader's batches exactly as they are (offsets, epochs, timestamps kept).

        The first batch must start at the log end offset and each next one where the
        previous ended (else InvalidRequestError, nothing written); CRCs are verified
        (CorruptRecordError). A batch whose leader epoch is newer than the cache's latest
        adds an epoch-cache entry, so the follower's history matches the leader's. Every
        batch (data or marker) is applied to the producer state without validation.
        """
        view = memoryview(buf).cast("B")
        for pos, h in batches:
            verify_crc(view, pos, h)
        return self._append(buf, batches, None, None, _FOLLOWER)

    def append_control(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        leader_epoch: int,
    ) -> AppendInfo:
        """Write a COMMIT / ABORT marker for ``producer_id`` as leader (docs/transactions.md
        "Control batches"), stamped with the log's clock.

        Raises InvalidProducerEpochError when ``producer_epoch`` is below the producer's,
        TransactionCoordinatorFencedError when ``coordinator_epoch`` is below the last
        marker's (nothing written). The producer then moves to ``producer_epoch`` with an
        empty sequence cache and no open transaction; an ABORT closing one adds a
        txnindex entry. A marker for a producer with nothing open is written and harmless.
        """
        with self._lock:
            self._check_open()
            self._producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
            buf = encode_control_batch(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                committed=committed,
                coordinator_epoch=coordinator_epoch,
                timestamp_ms=self._clock(),
            )
            return self._append(buf, [(0, parse_header(buf))], leader_epoch, None, _CONTROL)

    def _append(
        self,
        buf: Buffer,
        batches: Sequence[tuple[int, BatchHeader]],
        leader_epoch: int | None,
        log_append_time: int | None,
        mode: int,
    ) -> AppendInfo:
        """Leader and control modes (``leader_epoch`` set): patch offsets/epoch; follower
        mode (None): write the bytes as they are after checking the offsets continue the
        log. Then every batch with a producer id updates the producer state."""
        view = memoryview(buf).cast("B")
        total, offsets = appending.measure(view, batches)
        follower = leader_epoch is None
        with self._lock:
            self._check_open()
            if mode == _LEADER:
                checked = self._check_producers(batches)
                if isinstance(checked, AppendInfo):
                    return checked
                if checked is not batches:
                    batches = checked
                    total, offsets = appending.measure(view, batches)
            now = self._clock()
            stamp = not follower and self.config.message_timestamp_type == "LogAppendTime"
            append_time = (log_append_time if log_append_time is not None else now) if stamp else -1
            last = batches[-1][1].last_offset if follower else self._leo + offsets - 1
            seg = self._maybe_roll(total, max(last, self._leo + offsets - 1), now)
            w = appending.prepare(
                view,
                batches,
                start=self._leo,
                leader_epoch=leader_epoch,
                append_time=append_time if stamp else None,
                latest_epoch=self.epochs.latest_epoch,
            )
            nxt = w.next_offset
            seg.append(w.pieces, w.metas, now)
            first = self._leo
            self._leo = nxt
            self._size += total
            self._unflushed_records += w.records
            if self._first_unflushed_ms is None:
                self._first_unflushed_ms = now
            for (pos, h), meta in zip(batches, w.metas, strict=True):
                if h.producer_id >= 0:
                    aborted = producer_recovery.apply_batch(
                        self._producers, view, pos, h, meta.base_offset
                    )
                    if aborted is not None:
                        seg.txn_index.append(aborted)
            self._publish()
            for epoch, start in w.new_epochs:
                self.epochs.assign(epoch, start)
            if 0 < self.config.flush_messages <= self._unflushed_records:
                self.flush()
            return AppendInfo(
                first,
                nxt - 1,
                w.max_timestamp,
                w.offset_of_max_timestamp,
                append_time,
                self._log_start,
                w.records,
                total,
            )

    def _check_producers(
        self, batches: Sequence[tuple[int, BatchHeader]]
    ) -> Sequence[tuple[int, BatchHeader]] | AppendInfo:
        """Leader check of a produce (``append`` doc): the batches to write, or the answer
        for a call made only of duplicates."""
        if not any(h.producer_id >= 0 or h.attributes & ATTR_CONTROL for _, h in batches):
            return batches
        if any(h.attributes & ATTR_CONTROL for _, h in batches):
            raise InvalidRequestError("a produced batch cannot be a control batch")
        dups = self._producers.check(batches)
        if not any(d is not None for d in dups):
            return batches
        new = [b for b, d in zip(batches, dups, strict=True) if d is None]
        if new:
            return new
        found = [d for d in dups if d is not None]
        top = max(found, key=lambda d: d.max_timestamp)
        return AppendInfo(
            min(d.first_offset for d in found),
            max(d.last_offset for d in found),
            top.max_timestamp,
            top.first_offset,
            -1,
            self._log_start,
            0,
            0,
            duplicate=True,
        )

    def _maybe_roll(self, nbytes: int, last_offset: int, now: int) -> LogSegment:
        seg = self._segments[-1]
        cfg = self.config
        if seg.size > 0 and (
            seg.size + nbytes > cfg.segment_bytes
            or (seg.rolling_base_ms is not None and now - seg.rolling_base_ms >= cfg.segment_ms)
            or seg.indexes_full
            or not seg.can_hold(last_offset, nbytes)
        ):
            seg = self.roll()
        if not seg.can_hold(last_offset, nbytes):
            raise MessageTooLargeError(
                f"one append of {nbytes} bytes / offsets up to {last_offset} exceeds a segment"
            )
        return seg

    def roll(self) -> LogSegment:
        """Seal the active segment and start a new one at the log end offset; writes the
        producer-state snapshot for that offset."""
        with self._lock:
            self._check_open()
            old = self._segments[-1]
            if old.size == 0:
                return old
            old.seal()
            self._sealed_unflushed.append(old)
            seg = self._new_segment(self._leo)
            self._segments.append(seg)
            self._publish(structure_changed=True)
            self._write_producer_snapshot(sync=False)
            return seg

    # -- reading (any thread, no lock) --------------------------------------------------

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

    # -- producer state and transactions ------------------------------------------------

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

    # -- leader epochs ------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch in this log's history (-1: none)."""
        with self._lock:
            return self.epochs.latest_epoch

    def assign_epoch(self, epoch: int) -> None:
        """A new leader starts ``epoch`` at the log end offset (no-op if already latest)."""
        with self._lock:
            self._check_open()
            if epoch > self.epochs.latest_epoch:
                self.epochs.assign(epoch, self._leo)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= ``epoch``, where it ends); see
        ``LeaderEpochCache.end_offset_for``."""
        with self._lock:
            return self.epochs.end_offset_for(epoch, self._leo)

    # -- retention and truncation -------------------------------------------------------

    def delete_retention(self, now_ms: int) -> int:
        """Delete whole oldest segments past retention.ms / retention.bytes; how many.

        A segment expires by time when its largest timestamp is older than ``retention.ms``;
        by size while the log minus that segment is still >= ``retention.bytes``. The
        active segment is never deleted. Advances (and checkpoints) the log start offset.
        Does nothing when cleanup.policy does not include ``delete`` (compact only).
        """
        with self._lock:
            self._check_open()
            cfg, segs = self.config, self._segments
            n = 0
            if not cfg.delete_enabled:
                return 0
            if cfg.retention_ms >= 0:
                while n < len(segs) - 1 and now_ms - segs[n].largest_timestamp() > cfg.retention_ms:
                    n += 1
            if cfg.retention_bytes >= 0:
                excess = self._size - sum(s.size for s in segs[:n]) - cfg.retention_bytes
                while n < len(segs) - 1 and excess - segs[n].size >= 0:
                    excess -= segs[n].size
                    n += 1
            if n:
                self._delete_oldest(n)
            return n

    def _delete_oldest(self, n: int) -> None:
        self.structure_version += 1
        gone = self._segments[:n]
        del self._segments[:n]
        self._size -= sum(s.size for s in gone)
        self._log_start = max(self._log_start, self._segments[0].base_offset)
        self._sealed_unflushed = [s for s in self._sealed_unflushed if s not in gone]
        self._publish(structure_changed=True)  # new readers no longer see them
        for seg in gone:
            seg.delete()  # unlink; the fd closes when the last reader drops the segment
        self.epochs.truncate_from_start(self._log_start)
        producer_snapshot.delete_below(self.dir, self._log_start)
        self._write_checkpoint()

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or above ``offset`` (whole batches: a batch containing
        ``offset`` goes too). Below the log start, empties the log and restarts at ``offset``.
        """
        with self._lock:
            self._check_open()
            if offset >= self._leo:
                return
            if offset < self._log_start:
                self.truncate_fully_and_start_at(offset)
                return
            self.structure_version += 1
            k = bisect.bisect_right([s.base_offset for s in self._segments], offset) - 1
            gone = self._segments[k + 1 :]
            del self._segments[k + 1 :]
            self._sealed_unflushed = [s for s in self._sealed_unflushed if s not in gone]
            self._publish(structure_changed=True)
            for seg in gone:
                seg.delete()
            active = self._segments[-1]
            if active in self._sealed_unflushed:
                self._sealed_unflushed.remove(active)
            self._leo = active.truncate_to_offset(offset)
            self.epochs.truncate_from_end(self._leo)
            self._after_truncation()
            self._rebuild_producer_state()  # drops snapshots and txnindex entries above

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at ``offset`` (a follower that
        fell out of the leader's range)."""
        with self._lock:
            self._check_open()
            self.structure_version += 1
            gone = self._segments
            for seg in gone:
                seg.delete()  # unlink first: the new segment may reuse a base offset's names
            self._segments = [self._new_segment(offset)]
            self._sealed_unflushed = []
            self._leo = self._log_start = offset
            self.epochs.clear()
            producer_snapshot.delete_above(self.dir, -1)
            self._after_truncation()
            self._rebuild_producer_state()

    def _after_truncation(self) -> None:
        self._size = sum(s.size for s in self._segments)
        self._recovery_point = min(self._recovery_point, self._leo)
        self._log_start = min(self._log_start, self._leo)
        self._publish(structure_changed=True)
        self._write_checkpoint()

    # -- compaction ---------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The current read snapshot (the cleaner reads sealed segments through it)."""
        return self._snap

    def replace_segments(
        self, old: Sequence[LogSegment], staged: Path, *, end: int, version: int
    ) -> bool:
        """Swap the run ``old`` of sealed segments for the cleaned segment staged in
        ``staged`` (``swap.py`` layout); False (nothing changed, stage removed) when the log
        changed since the cleaner read them (``structure_version`` moved, a segment gone or
        no longer sealed) or is closed. An empty cleaned segment is not installed: the run
        simply disappears (readers skip offset gaps, ``read`` doc).

        Commit point: the rename of the stage to its ``.swap-`` name; from there a crash is
        completed by ``swap.recover`` at the next open. Readers that captured the old
        segments keep reading their unlinked files.
        """
        with self._lock:
            segs = self._segments
            ok = not self._closed and version == self.structure_version and bool(old)
            if ok:
                try:
                    k = segs.index(old[0])
                except ValueError:
                    k = -1
                ok = k >= 0 and segs[k : k + len(old)] == list(old) and k + len(old) < len(segs)
            if not ok:
                swap.discard(staged)
                return False
            aborted = [e for seg in old for e in seg.txn_index.entries()]
            txn_index.write_merged(txn_index.path_for(staged, old[0].base_offset), aborted)
            done = swap.commit(staged, old[0].base_offset, end)
            for seg in old:
                seg.delete()  # unlink; readers holding it keep the fd (segment module doc)
            swap.install(self.dir, done)
            new = self._new_segment(old[0].base_offset)
            if not new.load(end, self._clock()):
                new.recover(check_crc=False)
                new.seal()
            new.next_offset = end
            replacement = [new]
            if new.size == 0:  # everything removed: the run of segments disappears
                new.delete()
                new.close()
                replacement = []
            segs[k : k + len(old)] = replacement
            self._size += new.size - sum(s.size for s in old)
            self._sealed_unflushed = [s for s in self._sealed_unflushed if s not in old]
            self.structure_version += 1
            self._publish(structure_changed=True)
            return True

    # -- flushing -----------------------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment written since the last flush; recovery point = log end."""
        with self._lock:
            self._check_open()
            for seg in [*self._sealed_unflushed, self._segments[-1]]:
                seg.flush()
            self._sealed_unflushed = []
            self._recovery_point = self._leo
            self._unflushed_records = 0
            self._first_unflushed_ms = None

    def maybe_flush(self, now_ms: int) -> bool:
        """Periodic flush policy; True when it fsynced the active segment.

        Sealed segments are always fsynced here (the recovery point then moves to the active
        segment's base); the active one when ``flush.ms`` >= 0 and its oldest unflushed
        append is that old (``flush.messages`` is applied by ``append`` itself). Writes the
        checkpoint when the recovery point or log start moved.
        """
        with self._lock:
            self._check_open()
            flushed = False
            if self._sealed_unflushed:
                for seg in self._sealed_unflushed:
                    seg.flush()
                self._sealed_unflushed = []
                self._recovery_point = max(self._recovery_point, self._segments[-1].base_offset)
            first = self._first_unflushed_ms
            if (
                self.config.flush_ms >= 0
                and first is not None
                and now_ms - first >= self.config.flush_ms
            ):
                self.flush()
                flushed = True
            self._write_checkpoint()
            return flushed

    def _write_checkpoint(self) -> None:
        cp = checkpoint.Checkpoint(self._log_start, self._recovery_point)
        if cp != self._written_checkpoint:
            try:
                checkpoint.write_checkpoint(self.dir, cp)
            except OSError as exc:
                raise KafkaStorageError(f"cannot write checkpoint in {self.dir}: {exc}") from exc
            self._written_checkpoint = cp

    # -- configuration and lifecycle ----------------------------------------------------

    def update_config(self, config: TopicConfig) -> None:
        """New limits apply from the next append (index sizes: from the next segment)."""
        with self._lock:
            self.config = config
            self._segments[-1].index_interval_bytes = config.index_interval_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.dir.name} is closed")

    def close(self, *, mark_clean: bool = True) -> None:
        """fsync, checkpoint, write the clean-shutdown marker, close every descriptor.

        ``mark_clean=False`` skips the fsync and the marker, as if the process had died:
        the next open validates the tail.
        """
        with self._lock:
            if self._closed:
                return
            if mark_clean:
                self.flush()
                self._write_checkpoint()
                self._write_producer_snapshot(sync=True)
            self._closed = True
            for seg in self._segments:
                seg.close()
            if mark_clean:
                checkpoint.mark_clean_shutdown(self.dir)

    def delete(self) -> None:
        """Remove the whole partition directory, renamed aside first so that a crash part-way
        leaves no partial log to reopen (``fileio.remove_dir``); readers holding segments keep
        reading."""
        with self._lock:
            self._closed = True
            aside = fileio.rename_for_deletion(self.dir)
            for seg in self._segments:
                seg.delete()  # closes the indexes (the files have moved: nothing to unlink)
            if aside is not None:
                fileio.remove_renamed(aside)

    def __repr__(self) -> str:
        s = self._snap
        return f"Log({self.dir.name}, start={s.log_start_offset}, end={s.log_end_offset})"
