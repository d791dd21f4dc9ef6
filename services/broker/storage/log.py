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

Code: ``Log`` is this module (loading, appending, rolling, leader epochs, flushing, the
lifecycle) over ``log_read.py`` (reading, no lock), ``log_cleanup.py`` (retention,
truncation, the cleaner's swap) and ``log_state.py`` (the fields, the read snapshot, the
checkpoint and producer-state helpers they share).

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

from collections.abc import Callable, Sequence
from pathlib import Path

from headwater.batch.codec import now_ms, verify_crc
from headwater.batch.control import encode_control_batch
from headwater.batch.layout import ATTR_CONTROL, BatchHeader, parse_header
from headwater.config import TopicConfig
from headwater.errors import InvalidRequestError, KafkaStorageError, MessageTooLargeError
from services.broker.storage import (
    appending,
    checkpoint,
    fileio,
    producer_recovery,
    recovery,
    swap,
    txn_index,
)
from services.broker.storage.log_cleanup import LogCleanup
from services.broker.storage.log_read import LogReads
from services.broker.storage.log_state import Clock
from services.broker.storage.results import AppendInfo, FetchSlice, Snapshot
from services.broker.storage.segment import LogSegment

__all__ = ["AppendInfo", "Clock", "FetchSlice", "Log", "Snapshot"]

Buffer = bytes | bytearray | memoryview
# append modes
_LEADER, _FOLLOWER, _CONTROL = 0, 1, 2


class Log(LogCleanup, LogReads):
    """A partition's segments, offsets, retention, flushing and recovery (see module doc)."""

    def __init__(self, directory: Path, config: TopicConfig, *, clock: Clock = now_ms) -> None:
        super().__init__(directory, config, clock=clock)
        self._load()

    # -- loading ------------------------------------------------------------------------

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
        # A log with nothing stored (a new partition): its checkpoint and epoch file say what
        # their absence says, so they are written without an fsync each (thousands of new
        # partitions at once; LogManager.sync_created makes them durable in one call).
        fresh = not bases and cp is None
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
        self._write_checkpoint(sync=not fresh)
        self.epochs = recovery.load_epoch_cache(
            self.dir,
            segs,
            log_start=self._log_start,
            log_end=self._leo,
            clean=clean,
            recovery_point=recovery_point,
            sync=not fresh,
        )
        self._rebuild_producer_state()

    # -- appending ----------------------------------------------------------------------

    def ahead_of_sequence(self, batches: Sequence[tuple[int, BatchHeader]]) -> bool:
        """The first batch of a produce starts after its producer's next sequence (see
        ``ProducerStateManager.ahead_of_sequence``); a read, safe while an append runs."""
        return bool(batches) and self._producers.ahead_of_sequence(batches[0][1])

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
        retention). For small appends on the event loop (services/broker/partition.py); a
        new leader epoch's entry costs no file here (``leader_epoch`` module doc)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self.append(buf, batches, leader_epoch)
        finally:
            self._lock.release()

    def append_as_follower_if_uncontended(
        self, buf: Buffer, batches: Sequence[tuple[int, BatchHeader]]
    ) -> AppendInfo | None:
        """:meth:`append_as_follower` now, or None (nothing done) when it could block the
        caller: another thread holds the log. For a follower's small appends on the event
        loop (services/broker/partition.py), the first batches of a new leader epoch
        included (their entry costs no file here); raises what :meth:`append_as_follower`
        raises."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self.append_as_follower(buf, batches)
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

    # -- leader epochs ------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch in this log's history (-1: none)."""
        with self._lock:
            return self.epochs.latest_epoch

    def assign_epoch(self, epoch: int) -> None:
        """A new leader starts ``epoch`` at the log end offset (no-op if already latest): in
        memory, the file follows (``leader_epoch`` module doc)."""
        with self._lock:
            self._check_open()
            if epoch > self.epochs.latest_epoch:
                self.epochs.assign(epoch, self._leo)

    def assign_epoch_if_uncontended(self, epoch: int) -> bool:
        """:meth:`assign_epoch` now and True, or False (nothing done) when another thread
        holds the log: for the event loop (``Partition.become_leader``)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self.assign_epoch(epoch)
            return True
        finally:
            self._lock.release()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= ``epoch``, where it ends); see
        ``LeaderEpochCache.end_offset_for``."""
        with self._lock:
            return self.epochs.end_offset_for(epoch, self._leo)

    def end_offset_for_epoch_if_uncontended(self, epoch: int) -> tuple[int, int] | None:
        """:meth:`end_offset_for_epoch` now, or None when another thread holds the log: for
        the event loop (the OffsetForLeaderEpoch handler)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self.epochs.end_offset_for(epoch, self._leo)
        finally:
            self._lock.release()

    def write_epochs_behind(self) -> bool:
        """Write the leader-epoch file when it lacks entries, without fsync and without the
        log's lock (the flush pass); True when written (``LeaderEpochCache.write_behind``)."""
        return not self._closed and self.epochs.write_behind()

    # -- flushing -----------------------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment written since the last flush (and the epoch cache's file: its
        entries below the recovery point must be durable); recovery point = log end."""
        with self._lock:
            self._check_open()
            self.epochs.sync()
            for seg in [*self._sealed_unflushed, self._segments[-1]]:
                seg.flush()
            self._sealed_unflushed = []
            self._recovery_point = self._leo
            self._unflushed_records = 0
            self._first_unflushed_ms = None

    def _flush_sealed(self) -> None:
        """fsync the segments sealed since the last flush without holding the log's lock
        (appends go on: a sealed segment of 1 GiB can take seconds to write out, as Kafka's
        flush after a roll does outside its log lock), then, under the lock, forget them and
        move the recovery point up to the first segment still unflushed. ``close`` and
        ``delete`` wait for it (``_flush_lock``); a segment removed meanwhile (retention,
        truncation, a cleaner swap) may fail its fsync and is passed over, and after any of
        those the list and the recovery point stay for the next pass (a segment cut back and
        sealed again holds bytes this fsync did not cover)."""
        with self._lock:
            self._check_open()
            sealed = list(self._sealed_unflushed)
            version = self.structure_version
        if not sealed:
            return
        with self._flush_lock:
            if self._closed:
                return
            for seg in sealed:
                try:
                    seg.flush()
                except KafkaStorageError:
                    if not seg.deleted:
                        raise
        with self._lock:
            if self._closed or self.structure_version != version:
                # Closed meanwhile, or truncated / retention / a cleaner swap: the list may now
                # hold a segment of the snapshot cut back and sealed again with bytes this
                # fsync never saw. It stays as it is; the next pass fsyncs what it names.
                return
            self.epochs.sync()
            self._sealed_unflushed = [s for s in self._sealed_unflushed if s not in sealed]
            first = self._sealed_unflushed[:1] or self._segments[-1:]
            self._recovery_point = max(self._recovery_point, first[0].base_offset)

    def _nothing_to_flush(self, now_ms: int) -> bool:
        """Whether :meth:`maybe_flush` would do nothing, read without the lock: a writer that
        changes the answer meanwhile is seen by the next pass."""
        if self._closed or self._sealed_unflushed:
            return False
        first = self._first_unflushed_ms
        if (
            self.config.flush_ms >= 0
            and first is not None
            and now_ms - first >= self.config.flush_ms
        ):
            return False
        cp = self._written_checkpoint
        return (
            cp is not None
            and cp.log_start_offset == self._log_start
            and cp.recovery_point == self._recovery_point
        )

    def wants_flush_pass(self) -> bool:
        """Whether a later flush pass may have work here without any further change to the
        log: an epoch file to write behind, sealed segments to fsync, unflushed appends under
        a ``flush.ms`` policy (due later), or a checkpoint to write. Read without the lock,
        like :meth:`_nothing_to_flush`; a change made meanwhile releases the log's lock,
        which reports the log changed again (``log_state.ReportingLock``)."""
        if self._closed:
            return False
        cp = self._written_checkpoint
        return bool(
            self.epochs.dirty
            or self._sealed_unflushed
            or (self.config.flush_ms >= 0 and self._first_unflushed_ms is not None)
            or cp is None
            or cp.log_start_offset != self._log_start
            or cp.recovery_point != self._recovery_point
        )

    def on_change(self, listener: Callable[[], None] | None) -> None:
        """Call ``listener`` after every change of this log's state (each release of its
        lock, by whichever thread made it; it must be cheap): the ``LogManager`` keeps the
        set of logs its flush pass must look at with it."""
        self._lock.on_release = listener

    def maybe_flush(self, now_ms: int) -> bool:
        """Periodic flush policy; True when it fsynced the active segment.

        Sealed segments are always fsynced here (the recovery point then moves to the active
        segment's base); the active one when ``flush.ms`` >= 0 and its oldest unflushed
        append is that old (``flush.messages`` is applied by ``append`` itself). Writes the
        checkpoint when the recovery point or log start moved. A log with nothing to do is
        passed over without its lock (the periodic pass visits every log every second).
        """
        if self._nothing_to_flush(now_ms):
            return False
        self._flush_sealed()
        with self._lock:
            if self._closed:  # closed during the fsync of its sealed segments
                return False
            flushed = False
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

    # -- configuration and lifecycle ----------------------------------------------------

    def update_config(self, config: TopicConfig) -> None:
        """New limits apply from the next append (index sizes: from the next segment)."""
        with self._lock:
            self.config = config
            self._segments[-1].index_interval_bytes = config.index_interval_bytes

    def close(self, *, mark_clean: bool = True) -> None:
        """fsync, checkpoint, write the clean-shutdown marker, close every descriptor.

        ``mark_clean=False`` skips the fsync and the marker, as if the process had died:
        the next open validates the tail.
        """
        with self._flush_lock, self._lock:
            if self._closed:
                return
            if mark_clean:
                self.flush()
                self._write_checkpoint()
                self._write_producer_snapshot(sync=True)
            self._closed = True
            self.epochs.close()
            for seg in self._segments:
                seg.close()
            if mark_clean:
                checkpoint.mark_clean_shutdown(self.dir)

    def delete(self) -> None:
        """Remove the whole partition directory, renamed aside first so that a crash part-way
        leaves no partial log to reopen (``fileio.remove_dir``); readers holding segments keep
        reading."""
        with self._flush_lock, self._lock:
            self._closed = True
            self.epochs.close()  # a flush pass's write must not land in a new log's directory
            aside = fileio.rename_for_deletion(self.dir)
            for seg in self._segments:
                seg.delete()  # closes the indexes (the files have moved: nothing to unlink)
            if aside is not None:
                fileio.remove_renamed(aside)

    def __repr__(self) -> str:
        s = self._snap
        return f"Log({self.dir.name}, start={s.log_start_offset}, end={s.log_end_offset})"
