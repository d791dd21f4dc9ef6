"""headwater.timeouts.wait_for keeps a cancellation that Python 3.11's asyncio.wait_for loses.

The race (cpython gh-86296): the awaited operation completes in the same loop iteration as
the waiting task is cancelled. A service loop ``while True: await wait_for(event.wait(), t)``
must still end when cancelled, or its shutdown waits forever.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

import pytest

from headwater import timeouts

pytestmark = pytest.mark.fast

Waiter = Callable[[Awaitable[bool], float], Awaitable[bool]]


async def _loop_survives_cancel(wait: Waiter) -> bool:
    """Cancel a waiting loop in the iteration its event is set; True if it kept running."""
    event = asyncio.Event()
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            await wait(event.wait(), 5)
            event.clear()
            rounds += 1

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # the loop is waiting
    event.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=1)
    if not done:
        task.cancel()  # a second cancel lands while it waits on a clear event
        await asyncio.wait({task}, timeout=1)
    return not done


def test_a_cancel_racing_completion_ends_the_loop() -> None:
    assert asyncio.run(_loop_survives_cancel(timeouts.wait_for)) is False


def test_the_race_is_real_with_asyncio_wait_for_on_311() -> None:
    # the control (the project runs on 3.11; 3.12 fixed it): what hung services on SIGTERM
    assert sys.version_info[:2] == (3, 11)
    assert asyncio.run(_loop_survives_cancel(asyncio.wait_for)) is True


def test_the_deadline_still_raises_timeout_error() -> None:
    async def main() -> None:
        with pytest.raises(TimeoutError):
            await timeouts.wait_for(asyncio.Event().wait(), 0.05)
        assert await timeouts.wait_for(asyncio.sleep(0, result=7), 1) == 7

    asyncio.run(main())


def test_a_deadline_already_past_times_out_even_when_the_operation_could_complete() -> None:
    # a runtime polling its queue with an overdue tick must get the tick (asyncio.wait_for's
    # rule for timeout <= 0; asyncio.timeout(0) would return the queued item instead)
    async def main() -> None:
        q: asyncio.Queue[int] = asyncio.Queue()
        q.put_nowait(1)
        with pytest.raises(TimeoutError):
            await timeouts.wait_for(q.get(), 0)
        assert q.qsize() == 1  # the item stays queued
        done = asyncio.get_running_loop().create_future()
        done.set_result(5)
        assert await timeouts.wait_for(done, 0) == 5

    asyncio.run(main())
