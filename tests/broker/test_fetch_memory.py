"""FetchMemory: the per-connection and per-broker bounds on unsent fetch bytes (pure logic)."""

from __future__ import annotations

import asyncio

import pytest

from services.broker.fetch_memory import FetchMemory

pytestmark = pytest.mark.fast


def test_per_connection_bound_blocks_that_connection_only() -> None:
    async def run() -> None:
        m = FetchMemory(total=100, per_connection=30)
        assert await m.acquire("a", 20) == 20
        blocked = asyncio.ensure_future(m.acquire("a", 50))  # capped at 30; 20 + 30 > 30
        await asyncio.sleep(0)
        assert not blocked.done(), "connection a is over its bound"
        assert await asyncio.wait_for(m.acquire("b", 30), 1) == 30  # b has its own bound
        m.release("a", 20)
        assert await asyncio.wait_for(blocked, 1) == 30
        assert m.held_by("a") == 30

    asyncio.run(run())


def test_total_bound_and_settle_gives_back_what_a_read_did_not_use() -> None:
    async def run() -> None:
        m = FetchMemory(total=40, per_connection=30)
        g = await m.acquire("a", 30)
        m.settle("a", g, 5)  # the read returned 5 bytes: 25 come back
        assert (m.used, m.held_by("a")) == (5, 5)
        assert await m.acquire("b", 30) == 30
        waiting = asyncio.ensure_future(m.acquire("c", 10))
        await asyncio.sleep(0)
        assert not waiting.done(), "the broker-wide bound is reached"
        m.release("b", 30)
        assert await asyncio.wait_for(waiting, 1) == 10
        m.release("a", 5)
        m.release("c", 10)
        assert m.used == 0 and m.held_by("a") == m.held_by("c") == 0

    asyncio.run(run())


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FetchMemory(total=0)
