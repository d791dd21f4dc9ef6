"""Time a coroutine spends *running* on the event loop (its steps), not waiting.

The request quota (``request_percentage``) is a share of request-handling time. A broker
handler is a coroutine: between its awaits it runs on the loop (parsing, validating,
building responses); while it awaits (a worker thread appending, replication for acks=all,
a long poll) other requests run. :class:`Timed` drives the wrapped coroutine step by step,
as ``asyncio.Task`` would, and adds up the wall time of each step — the closest asyncio
analogue of Kafka's per-request I/O-thread time. Work in worker threads (disk appends, large
CRC checks) is not counted.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Timed(Generic[T]):
    """``await Timed(coro)`` runs ``coro``; afterwards ``seconds`` holds its run time."""

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, T]:
        coro = self._coro
        send_value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coro.throw(error) if error is not None else coro.send(send_value)
            except StopIteration as stop:
                return stop.value
            finally:
                self.seconds += time.perf_counter() - started
            try:
                send_value = yield yielded
                error = None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation and throws go into the coroutine
                send_value = None
                error = exc
