"""The idempotent producer against a real local cluster (etcd, controller, broker processes).

A lost response is simulated at the client's gRPC edge: the first produce call really reaches
the broker and is appended, then the client is told the call failed (UNAVAILABLE), so the
sender resends the same bytes. The broker must answer the duplicate with the original offset
and the log must hold each record once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc

from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer, TopicPartition
from headwater.client.types import ConsumerRecord
from headwater.v1 import broker_pb2

T = TypeVar("T")


def run(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(fn())


async def create(boot: str, name: str, partitions: int) -> None:
    async with AsyncAdminClient(boot) as admin:
        await admin.create_topic(name, partitions, 1, {})


async def read_all(boot: str, tp: TopicPartition, expected: int) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    async with AsyncConsumer(boot, auto_offset_reset="earliest") as c:
        c.assign([tp])
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(await c.poll(timeout_ms=300, max_records=10_000))
        # nothing beyond the expected records arrives (a duplicate would)
        out.extend(await c.poll(timeout_ms=500, max_records=10_000))
    return out


def test_lost_produce_response_is_retried_without_duplicates(cluster: Any) -> None:
    boot = cluster.bootstrap
    tp = TopicPartition("idem-lost-response", 0)

    async def body() -> None:
        await create(boot, tp.topic, 1)
        async with AsyncProducer(boot, linger_ms=1, retry_backoff_ms=20) as p:
            assert p.acks == broker_pb2.ACKS_ALL and p.enable_idempotence
            await p.send_and_wait(tp.topic, b"warm-up", partition=0)
            pool = p._pool
            assert pool is not None
            real = pool.raw_produce
            dropped: list[int] = []

            def lossy(address: str) -> Any:
                call = real(address)

                async def maybe_lose(request: bytes, timeout: float) -> Any:
                    resp = await call(request, timeout=timeout)
                    if not dropped:
                        dropped.append(len(request))  # appended, but the answer is "lost"
                        raise grpc.aio.AioRpcError(
                            grpc.StatusCode.UNAVAILABLE,
                            grpc.aio.Metadata(),
                            grpc.aio.Metadata(),
                            details="response dropped by the test",
                        )
                    return resp

                return maybe_lose

            pool.raw_produce = lossy  # type: ignore[method-assign]
            futs = [await p.send(tp.topic, b"r%d" % i, partition=0) for i in range(20)]
            metas = await asyncio.wait_for(asyncio.gather(*futs), 30)
            assert dropped, "the test never dropped a response"
            assert [m.offset for m in metas] == list(range(1, 21))
        records = await read_all(boot, tp, 21)
        assert [r.value for r in records] == [b"warm-up"] + [b"r%d" % i for i in range(20)]
        assert [r.offset for r in records] == list(range(21))

    run(body)


def test_non_idempotent_paths_still_work(cluster: Any) -> None:
    boot = cluster.bootstrap
    tp = TopicPartition("idem-off", 0)

    async def body() -> None:
        await create(boot, tp.topic, 1)
        async with AsyncProducer(boot, acks=1) as p:
            assert not p.enable_idempotence
            m = await p.send_and_wait(tp.topic, b"a", partition=0)
            assert m.offset == 0
        async with AsyncProducer(boot, acks="all", enable_idempotence=False) as p:
            m = await p.send_and_wait(tp.topic, b"b", partition=0)
            assert m.offset == 1
        records = await read_all(boot, tp, 2)
        assert [r.value for r in records] == [b"a", b"b"]

    run(body)
