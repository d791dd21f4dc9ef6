"""The producer's buffer memory: a byte budget for records not yet completed, with FIFO waits.

Buffer memory is the sum of the estimated sizes of the records not yet completed;
:meth:`BufferMemory.reserve` (on the loop) and :meth:`BufferMemory.reserve_blocking` (another
thread) wait in one FIFO while a reservation would exceed ``buffer_memory``, and raise
:class:`BufferExhaustedError` after ``max_block_ms``. :meth:`BufferMemory.release` returns bytes
and grants waiters in order. :class:`headwater.client.accumulator.Accumulator` is a
BufferMemory: its per-record append reads and updates ``used`` under the same ``lock`` without
a call.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable

from headwater import timeouts
from headwater.client.errors import BufferExhaustedError
from headwater.errors import MessageTooLargeError


class BufferMemory:
    """``buffer_memory`` bytes shared by the records not yet completed (see module docstring).

    Every field is guarded by ``lock`` (re-entrant; the accumulator's lock). ``on_blocked`` is
    called, outside the lock, whenever a writer starts waiting (blocked writers make every
    batch ready, so the sender must look). The sender reports each retry with
    :meth:`note_retry`: a wait that times out names the latest one (within ``max_block_ms``)
    and how long ago it was, often why the buffer did not drain (a broker answering
    KAFKA_STORAGE_ERROR for a full disk, a partition without a leader); it may also have
    succeeded since, on a partition other than the one the buffer waits for.
    """

    def __init__(
        self, buffer_memory: int, max_block_ms: float, on_blocked: Callable[[], None]
    ) -> None:
        self.buffer_memory = buffer_memory
        self.max_block = max_block_ms / 1000
        self.used = 0
        self._mem_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._on_blocked = on_blocked
        #: (monotonic time, what was retried and why) of the sender's latest retry
        self._last_retry: tuple[float, str] | None = None
        #: guards every field above (and the accumulator's); taken by the loop and by threads
        self.lock = threading.RLock()

    def note_retry(self, what: str) -> None:
        """The sender re-enqueued a batch: ``what`` says which and after what error."""
        self._last_retry = (time.monotonic(), what)

    def exhausted(self, nbytes: int) -> BufferExhaustedError:
        """The error of a wait for ``nbytes`` that timed out."""
        message = (
            f"waited {self.max_block * 1000:.0f} ms for {nbytes} bytes of buffer memory "
            f"({self.used}/{self.buffer_memory} in use)"
        )
        retry = self._last_retry
        if retry is not None:
            ago = time.monotonic() - retry[0]
            if ago <= self.max_block:
                message += f"; the latest retry, {ago:.1f} s ago, was of {retry[1]}"
        return BufferExhaustedError(message)

    def try_reserve(self, nbytes: int) -> bool:
        with self.lock:
            if not self._mem_waiters and self.used + nbytes <= self.buffer_memory:
                self.used += nbytes
                return True
            return False

    async def reserve(self, nbytes: int) -> None:
        """Take ``nbytes`` of buffer memory, waiting (FIFO) up to ``max_block_ms``."""
        if nbytes > self.buffer_memory:
            raise MessageTooLargeError(
                f"{nbytes} bytes of records exceed buffer_memory={self.buffer_memory}"
            )
        with self.lock:
            if self.try_reserve(nbytes):
                return
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._mem_waiters.append((nbytes, fut))
        self._on_blocked()  # blocked writers make every batch ready
        try:
            await timeouts.wait_for(asyncio.shield(fut), self.max_block)
        except TimeoutError:
            if fut.done() and not fut.cancelled():
                return  # granted at the same moment the wait timed out
            with self.lock:
                fut.cancel()
                self._grant()
            raise self.exhausted(nbytes) from None
        except BaseException:
            with self.lock:
                if fut.done() and not fut.cancelled():
                    self.used -= nbytes
                fut.cancel()
                self._grant()
            raise

    def reserve_blocking(self, nbytes: int) -> None:
        """:meth:`reserve` for a thread other than the loop's: blocks the calling thread (FIFO
        with the loop's waiters) up to ``max_block_ms``, then :class:`BufferExhaustedError`."""
        if nbytes > self.buffer_memory:
            raise MessageTooLargeError(
                f"{nbytes} bytes of records exceed buffer_memory={self.buffer_memory}"
            )
        with self.lock:
            if self.try_reserve(nbytes):
                return
            waiter = _ThreadWaiter()
            self._mem_waiters.append((nbytes, waiter))  # type: ignore[arg-type]
        self._on_blocked()  # blocked writers make every batch ready
        if waiter.event.wait(self.max_block):
            waiter.check()
            return
        with self.lock:
            if waiter.event.is_set():
                waiter.check()
                return  # granted at the same moment the wait timed out
            waiter.cancel()
            self._grant()
        raise self.exhausted(nbytes)

    def release(self, nbytes: int) -> None:
        with self.lock:
            self.used -= nbytes
            self._grant()

    def _grant(self) -> None:
        # under self.lock
        while self._mem_waiters:
            need, fut = self._mem_waiters[0]
            if fut.done():
                self._mem_waiters.popleft()
                continue
            if self.used + need > self.buffer_memory and self.used > 0:
                return
            self._mem_waiters.popleft()
            self.used += need
            fut.set_result(None)

    @property
    def memory_blocked(self) -> bool:
        return bool(self._mem_waiters)

    def _take_mem_waiters(self) -> list[tuple[int, asyncio.Future[None]]]:
        """Remove every waiter (to fail them). Under ``lock``."""
        waiters = list(self._mem_waiters)
        self._mem_waiters.clear()
        return waiters


class _ThreadWaiter:
    """A thread blocked in :meth:`BufferMemory.reserve_blocking`: the slice of the asyncio
    future interface ``_grant`` and ``fail_all`` use, over a ``threading.Event``."""

    __slots__ = ("_cancelled", "error", "event")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.error: BaseException | None = None
        self._cancelled = False

    def done(self) -> bool:
        return self.event.is_set() or self._cancelled

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True

    def set_result(self, _value: None) -> None:
        self.event.set()

    def set_exception(self, exc: BaseException) -> None:
        self.error = exc
        self.event.set()

    def check(self) -> None:
        """Raise the error the wait ended with (the producer failed), if any."""
        if self.error is not None:
            raise self.error
