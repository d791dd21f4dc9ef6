"""Per-record futures that cost nothing until someone looks at them.

A record appended by :meth:`headwater.client.producer.AsyncProducer.produce` (and the blocking
``Producer.send``) gets a :class:`RecordFuture`: two slots, the record's batch and its index
in the batch. Nothing is allocated per record for the outcome: the batch's
:class:`BatchOutcome` (Kafka's ``ProduceRequestResult``) holds the base offset or the error once
the batch is done, and the record's :class:`RecordMetadata` is computed when asked for
(``base_offset + index``).

Waiting is per batch, created on first use: ``result(timeout)`` from any thread waits on the
outcome's ``threading.Event``; ``await future`` on the producer's loop waits on an asyncio
future of the batch. ``add_done_callback(fn)`` calls ``fn(future)`` once the batch is done (on
the producer's loop thread, or at once in the caller's thread if it is already done). A record
future cannot be cancelled (as in Kafka: a buffered record is sent).

Contract of the outcome: :meth:`BatchOutcome.resolve` / :meth:`BatchOutcome.reject` are called
once, on the producer's loop thread, after which ``done`` is True and never changes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from headwater.client.types import RecordMetadata, TopicPartition

log = logging.getLogger(__name__)

RecordCallback = Callable[[RecordMetadata | None, BaseException | None], None]

#: guards callback registration against completion (rarely contended: callbacks are few)
_CB_LOCK = threading.Lock()


class BatchOutcome:
    """The fate of one batch, shared by the futures of its records."""

    __slots__ = (
        "_afut",
        "_event",
        "base_offset",
        "callbacks",
        "done",
        "error",
        "log_append_time",
        "record_callbacks",
        "timestamp_at",
        "tp",
    )

    def __init__(self, tp: TopicPartition, timestamp_at: Callable[[int], int]) -> None:
        self.tp = tp
        self.timestamp_at = timestamp_at
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self._event: threading.Event | None = None
        self._afut: asyncio.Future[None] | None = None
        #: ``fn(future)`` callbacks added with RecordFuture.add_done_callback
        self.callbacks: list[tuple[Callable[[RecordFuture], Any], RecordFuture]] | None = None
        #: ``(index, callback(metadata, exc))`` of records produced with a callback
        self.record_callbacks: list[tuple[int, RecordCallback]] | None = None

    def metadata(self, index: int) -> RecordMetadata:
        off = self.base_offset + index if self.base_offset >= 0 else -1
        ts = self.log_append_time if self.log_append_time >= 0 else self.timestamp_at(index)
        return RecordMetadata(self.tp.topic, self.tp.partition, off, ts)

    def resolve(self, base_offset: int, log_append_time: int = -1) -> None:
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self._finish()

    def reject(self, exc: BaseException) -> None:
        self.error = exc
        self._finish()

    def _finish(self) -> None:
        with _CB_LOCK:
            if self.done:
                return
            self.done = True
            event, callbacks = self._event, self.callbacks
            self.callbacks = None
        if event is not None:
            event.set()
        afut = self._afut
        if afut is not None:
            loop = afut.get_loop()
            if asyncio._get_running_loop() is loop:
                _set_done(afut)
            else:  # awaited on another thread's loop
                loop.call_soon_threadsafe(_set_done, afut)
        if self.record_callbacks is not None:
            exc = self.error
            for index, cb in self.record_callbacks:
                try:
                    if exc is None:
                        cb(self.metadata(index), None)
                    else:
                        cb(None, exc)
                except Exception:
                    log.exception("a produce callback raised")
            self.record_callbacks = None
        if callbacks is not None:
            for fn, fut in callbacks:
                _run_callback(fn, fut)

    def wait(self, timeout: float | None) -> bool:
        """Block the calling thread until done or ``timeout``; True when done."""
        if self.done:
            return True
        with _CB_LOCK:
            if self.done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def loop_future(self) -> asyncio.Future[None]:
        """An asyncio future of the running loop (the producer's) done with the batch."""
        if self._afut is None:
            self._afut = asyncio.get_running_loop().create_future()
            if self.done:
                self._afut.set_result(None)
        return self._afut

    def add_callback(self, fn: Callable[[RecordFuture], Any], fut: RecordFuture) -> bool:
        """Register ``fn(fut)``; False (nothing registered) when already done."""
        with _CB_LOCK:
            if self.done:
                return False
            if self.callbacks is None:
                self.callbacks = []
            self.callbacks.append((fn, fut))
            return True


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _run_callback(fn: Callable[[RecordFuture], Any], fut: RecordFuture) -> None:
    try:
        fn(fut)
    except Exception:
        log.exception("a record future's done callback raised")


class _PyRecordFutureBase:
    """A record future's two fields: the base of :class:`RecordFuture` when the C module
    :mod:`headwater.client._cproduce` is not built (it defines the same base, whose instances
    it creates without a Python frame)."""

    __slots__ = ("_index", "_outcome")

    def __init__(self, outcome: BatchOutcome, index: int) -> None:
        self._outcome = outcome
        self._index = index


if TYPE_CHECKING:
    _RecordFutureBase = _PyRecordFutureBase
else:
    try:
        from headwater.client._cproduce import RecordFutureBase as _RecordFutureBase
    except ImportError:  # built without a C compiler: the Python base
        _RecordFutureBase = _PyRecordFutureBase


class RecordFuture(_RecordFutureBase):
    """The future of one produced record (see the module docstring).

    The subset of :class:`concurrent.futures.Future` a producer's caller uses — ``result``,
    ``exception``, ``done``, ``add_done_callback``, ``cancel`` (always False) — and awaitable on
    the producer's event loop. ``RecordFuture(outcome, index)``; its fields are its base's.
    """

    __slots__ = ()

    def done(self) -> bool:
        return self._outcome.done

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._outcome.done

    def cancel(self) -> bool:
        """A buffered record cannot be withdrawn: always False."""
        return False

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata; raises its error, or TimeoutError after ``timeout`` s."""
        o = self._outcome
        if not o.done and not o.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout} s")
        if o.error is not None:
            raise o.error
        return o.metadata(self._index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        o = self._outcome
        if not o.done and not o.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout} s")
        return o.error

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        """``fn(self)`` once done: on the producer's loop, or now if already done."""
        if not self._outcome.add_callback(fn, self):
            _run_callback(fn, self)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        o = self._outcome
        if not o.done:
            yield from o.loop_future().__await__()
        return self.result(0)

    def __repr__(self) -> str:
        o = self._outcome
        state = "pending" if not o.done else ("error" if o.error is not None else "done")
        return f"<RecordFuture {o.tp.topic}[{o.tp.partition}] #{self._index} {state}>"
