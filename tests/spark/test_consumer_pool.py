"""The per-worker consumer pool (headwater_spark.consumer_pool): reuse by key, reset on release,
bounded size, idle expiry, failed reads not reused."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from headwater_spark.consumer_pool import ConsumerPool, PoolStats, key_of
from headwater_spark.options import ExecutorConfig
from headwater_spark.security import SecuritySpec

from headwater.client.types import TopicPartition

pytestmark = pytest.mark.fast

CFG = ExecutorConfig(
    bootstrap="127.0.0.1:1",
    fail_on_data_loss=True,
    include_headers=False,
    poll_timeout_ms=1000,
    fetch_max_bytes=1 << 20,
    arrow_batches=True,
)


class FakeConsumer:
    def __init__(self, cfg: ExecutorConfig) -> None:
        self.cfg = cfg
        self.assigned: list[TopicPartition] = []
        self.closed = False
        self.fail_reset = False

    def assign(self, tps: list[TopicPartition]) -> None:
        if self.fail_reset:
            raise RuntimeError("cannot reset")
        self.assigned = list(tps)

    async def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _factory(cfg: ExecutorConfig) -> FakeConsumer:
    return FakeConsumer(cfg)


def _pool(**kw: Any) -> ConsumerPool:
    return ConsumerPool(_factory, **kw)


def test_a_released_consumer_is_reused_with_its_assignment_cleared() -> None:
    async def go() -> None:
        pool = _pool()
        c1 = await pool.acquire(CFG)
        c1.assign([TopicPartition("t", 0)])
        await pool.release(CFG, c1)
        assert c1.assigned == [] and not c1.closed
        c2 = await pool.acquire(CFG)
        assert c2 is c1
        assert pool.stats() == PoolStats(opened=1, reused=1, closed=0, idle=0)

    asyncio.run(go())


def test_reads_never_share_a_borrowed_consumer() -> None:
    async def go() -> None:
        pool = _pool()
        a = await pool.acquire(CFG)
        b = await pool.acquire(CFG)
        assert a is not b
        assert pool.stats().opened == 2

    asyncio.run(go())


SCRAM = SecuritySpec(protocol="SASL_PLAINTEXT", username="u", password="p")
BASE = replace(CFG, security=SCRAM)


@pytest.mark.parametrize(
    "other",
    [
        replace(BASE, bootstrap="127.0.0.1:2"),
        replace(BASE, isolation_level="read_committed"),
        replace(BASE, fetch_max_bytes=2 << 20),
        replace(BASE, security=replace(SCRAM, password="q")),
        replace(BASE, security=SecuritySpec()),
    ],
    ids=["bootstrap", "isolation", "fetch-size", "credentials", "protocol"],
)
def test_a_consumer_goes_only_to_reads_with_the_same_key(other: ExecutorConfig) -> None:
    """Bootstrap, isolation, fetch size and the security options (credentials too) key it."""
    base = BASE

    async def go() -> None:
        pool = _pool()
        c = await pool.acquire(base)
        await pool.release(base, c)
        d = await pool.acquire(other)
        assert d is not c and d.cfg == other
        assert await pool.acquire(base) is c

    assert key_of(other) != key_of(base)
    asyncio.run(go())


def test_options_of_one_read_only_do_not_split_the_pool() -> None:
    """failOnDataLoss, includeHeaders, pollTimeoutMs, arrowBatches are per read, not per
    consumer."""
    other = replace(
        CFG, fail_on_data_loss=False, include_headers=True, poll_timeout_ms=5, arrow_batches=False
    )

    async def go() -> None:
        pool = _pool()
        c = await pool.acquire(CFG)
        await pool.release(CFG, c)
        assert await pool.acquire(other) is c

    asyncio.run(go())


def test_a_failed_read_closes_its_consumer() -> None:
    async def go() -> None:
        pool = _pool()
        c = await pool.acquire(CFG)
        await pool.release(CFG, c, reusable=False)
        assert c.closed
        assert await pool.acquire(CFG) is not c
        assert pool.stats() == PoolStats(opened=2, reused=0, closed=1, idle=0)

    asyncio.run(go())


def test_a_consumer_that_cannot_be_reset_is_closed_not_reused() -> None:
    async def go() -> None:
        pool = _pool()
        c = await pool.acquire(CFG)
        c.fail_reset = True
        await pool.release(CFG, c)
        assert c.closed and pool.stats().idle == 0

    asyncio.run(go())


def test_idle_consumers_are_bounded_least_recently_used_closed_first() -> None:
    async def go() -> None:
        pool = _pool(max_idle=2)
        cs = [await pool.acquire(CFG) for _ in range(3)]
        for c in cs:
            await pool.release(CFG, c)
        assert [c.closed for c in cs] == [True, False, False]
        assert pool.stats().idle == 2
        assert await pool.acquire(CFG) is cs[2]  # the most recently released first

    asyncio.run(go())


def test_a_consumer_idle_past_the_timeout_is_closed() -> None:
    async def go() -> None:
        clock = Clock()
        pool = _pool(idle_timeout_s=60, clock=clock)
        old = await pool.acquire(CFG)
        await pool.release(CFG, old)
        clock.now = 61
        new = await pool.acquire(CFG)
        assert old.closed and new is not old
        assert pool.stats() == PoolStats(opened=2, reused=0, closed=1, idle=0)

    asyncio.run(go())


def test_close_all_closes_every_idle_consumer() -> None:
    async def go() -> None:
        pool = _pool()
        cs = [await pool.acquire(CFG) for _ in range(3)]
        for c in cs:
            await pool.release(CFG, c)
        await pool.close_all()
        assert all(c.closed for c in cs) and pool.stats().idle == 0

    asyncio.run(go())


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        _pool(max_idle=-1)
    with pytest.raises(ValueError):
        _pool(idle_timeout_s=0)
