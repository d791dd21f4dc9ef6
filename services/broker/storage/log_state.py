"""The state of one partition's :class:`~services.broker.storage.log.Log` and the helpers
that keep it consistent: the read snapshot, the partition checkpoint and the producer state.

``LogState`` holds every field of a ``Log``; the log's concerns are its subclasses
(``log_read.py``: reading; ``log_cleanup.py``: retention, truncation and the cleaner's swap;
``log.py``: loading, appending, rolling, flushing and the lifecycle). Fields starting with
``_`` are changed only under ``_lock`` (except by the loader, before the log is shared); the
read snapshot ``_snap`` is replaced, never changed, by :meth:`LogState._publish`.

Since every change of a log's state happens under ``_lock``, the lock is a
:class:`ReportingLock`: each release calls the log's ``on_change`` listener (set by the
``LogManager``), which is how the periodic flush pass visits only the logs that changed
since it last looked instead of every log every second.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from headwater.batch.codec import now_ms
from headwater.config import TopicConfig
from headwater.errors import KafkaStorageError
from services.broker.storage import checkpoint, producer_recovery, producer_snapshot
from services.broker.storage.leader_epoch import LeaderEpochCache
from services.broker.storage.producer_state import ProducerStateManager
from services.broker.storage.results import Snapshot
from services.broker.storage.segment import LogSegment

Clock = Callable[[], int]


class ReportingLock:
    """A re-entrant lock that calls ``on_release`` (when set) after each release: any thread,
    no lock held by then; the listener must be cheap and must not take this lock."""

    __slots__ = ("_lock", "on_release")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.on_release: Callable[[], None] | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()
        listener = self.on_release
        if listener is not None:
            listener()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class LogState:
    """A partition log's fields and consistency helpers (see module doc); not used alone."""

    def __init__(self, directory: Path, config: TopicConfig, *, clock: Clock = now_ms) -> None:
        self.dir = Path(directory)
        self.config = config
        self._clock = clock
        self._lock = ReportingLock()
        #: Held by the fsync of sealed segments outside ``_lock`` (``Log._flush_sealed``);
        #: ``close`` and ``delete`` take it before ``_lock`` (never the other way round).
        self._flush_lock = threading.Lock()
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

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
        )

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

    def _write_checkpoint(self, *, sync: bool = True) -> None:
        cp = checkpoint.Checkpoint(self._log_start, self._recovery_point)
        if cp != self._written_checkpoint:
            try:
                checkpoint.write_checkpoint(self.dir, cp, sync=sync)
            except OSError as exc:
                raise KafkaStorageError(f"cannot write checkpoint in {self.dir}: {exc}") from exc
            self._written_checkpoint = cp

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.dir.name} is closed")
