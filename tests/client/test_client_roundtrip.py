"""Producer -> broker -> consumer against a real local cluster (etcd, controller, broker)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from headwater.client import (
    AsyncAdminClient,
    AsyncConsumer,
    AsyncProducer,
    ConsumerRecord,
    TopicPartition,
    crc32c_partition,
)
from headwater.errors import UnknownTopicOrPartitionError

T = TypeVar("T")


def run(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(fn())


async def create(boot: str, name: str, partitions: int, **configs: str) -> None:
    async with AsyncAdminClient(boot) as admin:
        await admin.create_topic(name, partitions, 1, configs)


async def consume_all(
    boot: str, topic: str, partitions: int, expected: int, timeout_s: float = 30
) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    async with AsyncConsumer(boot, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(await c.poll(timeout_ms=500, max_records=10_000))
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd"])
def test_round_trip_every_codec_keys_partitions_order(cluster: Any, codec: str) -> None:
    boot = cluster.bootstrap
    topic = f"rt-{codec}"
    n_parts = 3

    async def body() -> None:
        await create(boot, topic, n_parts)
        async with AsyncProducer(boot, compression_type=codec, linger_ms=2) as p:
            futs = [
                await p.send(
                    topic, b"value-%d" % i, key=b"key-%d" % (i % 50), headers=[("i", b"%d" % i)]
                )
                for i in range(2000)
            ]
            group = await p.send_many(
                topic,
                [b"bulk-%d" % i for i in range(5000)],
                [b"key-%d" % (i % 50) for i in range(5000)],
            )
            metas = await asyncio.gather(*futs)
            gm = await group
        assert gm.record_count == 5000
        for i, m in enumerate(metas):
            assert m.partition == crc32c_partition(b"key-%d" % (i % 50), n_parts)
            assert m.offset >= 0
        records = await consume_all(boot, topic, n_parts, 7000)
        assert len(records) == 7000
        by_part: dict[int, list[ConsumerRecord]] = {}
        for r in records:
            by_part.setdefault(r.partition, []).append(r)
            assert r.partition == crc32c_partition(r.key or b"", n_parts)
        for part, rs in by_part.items():
            offsets = [r.offset for r in rs]
            assert offsets == list(range(len(rs))), f"partition {part} not dense/in order"
            # send() records precede the bulk group and keep their per-partition order
            vals = [r.value or b"" for r in rs]
            singles = [int(v.split(b"-")[1]) for v in vals if v.startswith(b"value-")]
            bulk = [int(v.split(b"-")[1]) for v in vals if v.startswith(b"bulk-")]
            assert singles == sorted(singles) and bulk == sorted(bulk)
        single_by_offset = {(m.partition, m.offset): i for i, m in enumerate(metas)}
        for r in records:
            if (r.value or b"").startswith(b"value-"):
                i = single_by_offset[(r.partition, r.offset)]
                assert r.value == b"value-%d" % i and r.headers == (("i", b"%d" % i),)

    run(body)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_levels(cluster: Any, acks: str) -> None:
    boot = cluster.bootstrap
    topic = f"acks-{acks}"

    async def body() -> None:
        await create(boot, topic, 1)
        async with AsyncProducer(boot, acks=acks) as p:
            meta = await (await p.send(topic, b"one"))
            gm = await (await p.send_many(topic, [b"two", b"three"]))
        if acks == "0":
            assert meta.offset == -1 and gm.ranges[0].base_offset == -1
        else:
            assert meta.offset == 0 and gm.ranges[0].base_offset == 1
        records = await consume_all(boot, topic, 1, 3)
        assert [r.value for r in records] == [b"one", b"two", b"three"]

    run(body)


def test_sticky_null_keys_fill_batches_then_switch(cluster: Any) -> None:
    boot = cluster.bootstrap
    topic = "sticky"

    async def body() -> None:
        await create(boot, topic, 4)
        async with AsyncProducer(boot, batch_size=16 * 1024) as p:
            gm = await (await p.send_many(topic, [b"x" * 100] * 4000))
        # ~16 KiB batches: many ranges, spread over more than one partition, each range dense
        assert len(gm.ranges) >= 20
        assert len({r.partition for r in gm.ranges}) > 1
        records = await consume_all(boot, topic, 4, 4000)
        assert len(records) == 4000

    run(body)


def test_tight_send_loop_does_not_starve_the_sender(cluster: Any) -> None:
    """``await send()`` in a loop that never yields otherwise: batches leave as they fill,
    long before buffer memory runs out (send yields once per sealed batch)."""
    boot = cluster.bootstrap
    topic = "tight-loop"

    async def body() -> None:
        await create(boot, topic, 1)
        async with AsyncProducer(
            boot, batch_size=16 * 1024, buffer_memory=64 * 1024 * 1024, linger_ms=1000
        ) as p:
            futures = [await p.send(topic, b"v" * 100) for _ in range(200_000)]
            # ~20 MiB sent into a 64 MiB buffer: without yielding, nothing would be
            # acknowledged before this point (the linger is 1 s and memory never runs out).
            acked_during_loop = sum(f.done() for f in futures)
            await p.flush()
        assert acked_during_loop > 0
        assert [f.result().offset for f in futures] == list(range(200_000))

    run(body)


def test_unknown_topic_fails_after_max_block(cluster: Any) -> None:
    async def body() -> None:
        async with AsyncProducer(cluster.bootstrap, max_block_ms=500) as p:
            t0 = time.monotonic()
            with pytest.raises(UnknownTopicOrPartitionError):
                await p.send("no-such-topic", b"v")
            assert time.monotonic() - t0 < 10

    run(body)


def test_custom_partitioner_and_explicit_partition(cluster: Any) -> None:
    boot = cluster.bootstrap
    topic = "custom-part"

    async def body() -> None:
        await create(boot, topic, 3)

        def last(key: bytes | None, n: int, t: str) -> int:
            return n - 1

        async with AsyncProducer(boot, partitioner=last) as p:
            m1 = await (await p.send(topic, b"a", key=b"k"))
            m2 = await (await p.send(topic, b"b", partition=0))
            gm = await (await p.send_many(topic, [b"c", b"d"], [b"x", b"y"]))
            with pytest.raises(UnknownTopicOrPartitionError):
                await p.send(topic, b"e", partition=7)
        assert (m1.partition, m2.partition) == (2, 0)
        assert [r.partition for r in gm.ranges] == [2]

    run(body)
