"""Write-behind off the append path: one thread per process starts the writeback of what
segments appended (and drops what a page-cache window leaves behind), so an appender never
waits on the block layer.

Only a broker with ``--log-page-cache-window-bytes`` starts writeback at all (by default the
kernel writes back, as with Kafka: docs/benchmarks.md "Session 37"). ``sync_file_range(
SYNC_FILE_RANGE_WRITE)`` does not wait for the disk, but it submits the writeback from the
calling thread: it allocates blocks (ext4's delayed allocation reads block bitmaps), waits for
pages already under writeback, and is throttled by the block layer's writeback limits
(``rq_qos_wait``) while another thread's fsync fills the device queue; inside
``LogSegment.append`` it held appends for 0.3-1.0 s every few seconds on a loaded machine.
``posix_fadvise(DONTNEED)`` writes dirty pages the same way. Here both run on a thread of their
own instead.

Contract: :meth:`WritebackQueue.submit` never blocks on I/O (a lock held for a dict update and
one ``dup``); it raises OSError when no descriptor is left (nothing queued) and RuntimeError
when the thread cannot be started (the job stays queued; the next submit starts it). Each
submitter (a segment) has at most one pending job; a later submit before the thread took it
widens that job's ranges, so the queue holds at most one job, and one duplicated descriptor,
per segment written since the thread last ran. The job writes back through its own duplicate
of the segment's descriptor, so a segment closed or deleted meanwhile cannot make it touch
another file. A job that raises is logged; the thread goes on with the next. Every range is a
hint: a failed or skipped call changes nothing but the page cache (``fileio.start_writeback``
/ ``fileio.drop_cached``), never the data.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from dataclasses import dataclass

from services.broker.storage import fileio

log = logging.getLogger(__name__)

#: An empty range (any ``(start, end)`` with ``start >= end`` is empty).
NO_RANGE = (0, 0)


def _union(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    if a[0] >= a[1]:
        return b
    if b[0] >= b[1]:
        return a
    return min(a[0], b[0]), max(a[1], b[1])


@dataclass
class _Job:
    fd: int
    writeback: tuple[int, int]
    drop: tuple[int, int]


class WritebackQueue:
    """Starts writebacks and drops cached ranges on one daemon thread (contract in the
    module doc)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: dict[object, _Job] = {}
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(
        self,
        owner: object,
        fd: int,
        writeback: tuple[int, int] = NO_RANGE,
        drop: tuple[int, int] = NO_RANGE,
    ) -> None:
        """Queue ``writeback`` (start writing ``[start, end)`` of ``fd`` back) and ``drop``
        (then drop ``[start, end)`` from the page cache) for ``owner``; merged into its pending
        job if it has one. Raises OSError only when ``fd`` cannot be duplicated (then nothing
        is queued)."""
        if writeback[0] >= writeback[1] and drop[0] >= drop[1]:
            return
        with self._cond:
            job = self._jobs.get(owner)
            if job is None:
                self._jobs[owner] = _Job(os.dup(fd), writeback, drop)
                self._cond.notify()
            else:
                job.writeback = _union(job.writeback, writeback)
                job.drop = _union(job.drop, drop)
            self._start_thread()

    def drain(self, timeout: float) -> bool:
        """Wait until every job submitted so far has run; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs and not self._busy, timeout)

    def _start_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="segment-writeback", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._jobs))
                owner = next(iter(self._jobs))
                job = self._jobs.pop(owner)
                self._busy = True
            try:
                start, end = job.writeback
                if start < end:
                    fileio.start_writeback(job.fd, start, end - start)
                start, end = job.drop
                if start < end:
                    fileio.drop_cached(job.fd, start, end - start)
            except Exception:  # a hint failed: the data is unaffected; keep serving
                log.exception("segment writeback of %s failed", owner)
            finally:
                with contextlib.suppress(OSError):
                    os.close(job.fd)
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


@functools.cache
def process_queue() -> WritebackQueue:
    """The process's one queue (its thread starts with the first job)."""
    return WritebackQueue()
