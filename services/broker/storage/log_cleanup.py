"""Removing data from a partition's log: retention, truncation and the cleaner's swap.

Every operation here removes or rewrites sealed data under the log's lock and bumps
``structure_version``, so that a cleaner pass that read the old segments does not install
its work over them. Segments removed here stay readable through read snapshots that hold
them (``log.py`` module doc, concurrency contract).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path

from services.broker.storage import producer_snapshot, swap, txn_index
from services.broker.storage.log_state import LogState
from services.broker.storage.segment import LogSegment


class LogCleanup(LogState):
    """Retention, truncation and compaction swaps of :class:`~services.broker.storage.log.Log`."""

    def delete_retention(self, now_ms: int) -> int:
        """Delete whole oldest segments past retention.ms / retention.bytes; how many.

        A segment expires by time when its largest timestamp is older than ``retention.ms``;
        by size while the log minus that segment is still >= ``retention.bytes``. The
        active segment is never deleted. Advances (and checkpoints) the log start offset.
        Does nothing when cleanup.policy does not include ``delete`` (compact only).
        A log of one segment (most of them on a broker with thousands) is passed over
        without its lock: taking it would report the log changed to the flush pass.
        """
        if not self._closed and len(self._segments) < 2:
            return 0  # only the active segment, which is never deleted
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
