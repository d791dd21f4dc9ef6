"""``wait_for`` that never loses a cancellation (Python 3.11's ``asyncio.wait_for`` can).

In 3.11, when the awaited operation completes in the same loop iteration as the waiting task
is cancelled, ``asyncio.wait_for`` returns the result and the ``CancelledError`` is lost
(cpython gh-86296, fixed in 3.12 by rebuilding ``wait_for`` on ``asyncio.timeout``). A loop
such as ``while True: ... await asyncio.wait_for(event.wait(), t)`` then keeps running after
``task.cancel()``, and whoever awaits the task on shutdown waits forever (seen: coordinators
and brokers hanging on SIGTERM until SIGKILLed, 10 s each). ``asyncio.timeout`` counts
cancellations per task (``Task.uncancel``) and is correct in 3.11; this module is the one place
every service and client waits with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(aw: Awaitable[T], timeout: float | None) -> T:
    """Await ``aw`` for at most ``timeout`` seconds (None: no limit); TimeoutError after.

    Unlike ``asyncio.wait_for`` in 3.11, a cancellation of the calling task always propagates.
    ``aw`` runs in the calling task (a coroutine is not wrapped in a new task); on the timeout
    it is cancelled, as with ``asyncio.wait_for``. A ``timeout`` <= 0 times out at once unless
    ``aw`` is a future that is already done (``asyncio.wait_for``'s rule).
    """
    if timeout is not None and timeout <= 0:
        # as asyncio.wait_for: an operation not already complete times out without running
        # (a caller polling a queue with a deadline already past must get its tick)
        fut = asyncio.ensure_future(aw)
        if fut.done():
            return fut.result()
        fut.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await fut
        raise TimeoutError
    async with asyncio.timeout(timeout):
        return await aw
