"""The one asyncio loop of a Spark Python worker process, in a daemon thread.

gRPC's asyncio support wants one loop per process, and Spark reuses a worker process for many
tasks, so executor code (reads and writes) never creates loops of its own: it submits
coroutines with :func:`run`, which blocks the task's thread until the result is ready. The
loop thread is started on first use and lives as long as the worker.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the worker's loop thread and return its result (or raise)."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(
                target=_loop.run_forever, name="headwater-spark-loop", daemon=True
            ).start()
        loop = _loop
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


def run_if_started(coro: Coroutine[Any, Any, Any], *, timeout_s: float) -> None:
    """Run ``coro`` on the loop if it was started (for clean-up at exit: a worker that never
    used the loop has nothing to clean), waiting at most ``timeout_s``; errors are logged."""
    with _lock:
        loop = _loop
    if loop is None or not loop.is_running():
        coro.close()
        return
    try:
        asyncio.run_coroutine_threadsafe(coro, loop).result(timeout_s)
    except Exception as exc:  # at exit: nothing left to raise to
        log.warning("clean-up on the worker loop failed: %s", exc)
