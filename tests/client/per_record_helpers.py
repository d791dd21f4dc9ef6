"""Shared by the per-record produce tests (tests/client/test_produce_per_record.py,
tests/client/test_produce_fast_path.py): an event loop in a thread as the blocking producer
runs it, an accumulator made on it, draining and acknowledging as a broker would."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from headwater.batch import Compression
from headwater.client.accumulator import Accumulator, ProducerBatch
from headwater.client.consumer import AsyncConsumer
from headwater.client.types import TopicPartition


class LoopThread:
    """An event loop in a thread, as the blocking producer runs it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, fn: Any, *args: Any) -> Any:
        async def go() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def make_acc(lt: LoopThread, **kw: Any) -> Accumulator:
    cfg: dict[str, Any] = dict(
        batch_size=4096,
        linger_ms=10,
        buffer_memory=1 << 30,
        max_block_ms=5000,
        delivery_timeout_ms=600_000,
        compression=Compression.NONE,
    )
    cfg.update(kw)

    def build() -> Accumulator:
        return Accumulator(**cfg)

    acc: Accumulator = lt.call(build)
    return acc


def drain_all(lt: LoopThread, acc: Accumulator) -> list[ProducerBatch]:
    def go() -> list[ProducerBatch]:
        acc.flushing += 1
        try:
            out, _next, _unknown = acc.drain(lambda _tp: 0, lambda _l: True, set(), 1 << 30)
        finally:
            acc.flushing -= 1
        return [b for bs in out.values() for b in bs]

    batches: list[ProducerBatch] = lt.call(go)
    return batches


def complete_in_order(lt: LoopThread, acc: Accumulator, batches: list[ProducerBatch]) -> None:
    """Acknowledge batches as a broker would: consecutive offsets per partition."""
    nxt: dict[TopicPartition, int] = {}

    def go() -> None:
        for b in batches:
            base = nxt.get(b.tp, 0)
            acc.complete(b, base)
            nxt[b.tp] = base + b.count

    lt.call(go)


def run_threads(target: Callable[[int], None], n: int, timeout: float = 120) -> None:
    """Run ``target(0..n-1)`` in ``n`` threads and join them (each within ``timeout`` s)."""
    ws = [threading.Thread(target=target, args=(t,)) for t in range(n)]
    for w in ws:
        w.start()
    for w in ws:
        w.join(timeout)
    assert not any(w.is_alive() for w in ws)


async def read_all(boot: str, topic: str, partitions: int, n: int) -> list[Any]:
    """Up to ``n`` records of ``topic`` from the start (bounded: 200 polls of up to 0.5 s)."""
    async with AsyncConsumer(boot, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: list[Any] = []
        for _ in range(200):
            out += await c.poll(timeout_ms=500, max_records=10_000)
            if len(out) >= n:
                break
        return out
