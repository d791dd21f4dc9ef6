"""Consumer positions and seeks, typed errors, the admin client and the blocking facades,
against a real local cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from headwater.client import (
    AdminClient,
    AsyncAdminClient,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    IllegalStateError,
    NoOffsetForPartitionError,
    Producer,
    TopicPartition,
)
from headwater.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    MessageTooLargeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

T = TypeVar("T")


def run(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(fn())


async def poll_until(c: AsyncConsumer, n: int, timeout_s: float = 20) -> list[bytes | None]:
    out: list[bytes | None] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out.extend(r.value for r in await c.poll(timeout_ms=300, max_records=n - len(out)))
    return out


def test_seek_positions_and_timestamps(cluster: Any) -> None:
    boot = cluster.bootstrap
    topic = "seeks"
    tp = TopicPartition(topic, 0)

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic(topic, 1)
        async with AsyncProducer(boot) as p:
            # three batches with distinct timestamps: 1000.., 2000.., 3000..
            for k in range(3):
                await (
                    await p.send_many(
                        topic, [b"%d-%d" % (k, i) for i in range(10)], timestamp=1000 * (k + 1)
                    )
                )
        async with AsyncConsumer(boot, auto_offset_reset="earliest") as c:
            c.assign([tp])
            assert await c.position(tp) == 0
            # max_records stops inside a batch; the position follows
            assert await poll_until(c, 4) == [b"0-%d" % i for i in range(4)]
            assert await c.position(tp) == 4
            c.seek(tp, 15)  # inside the second batch: records below 15 are skipped
            got = await poll_until(c, 3)
            assert got == [b"1-5", b"1-6", b"1-7"]
            await c.seek_to_end()
            assert await c.position(tp) == 30
            assert await c.poll(timeout_ms=200) == []
            await c.seek_to_beginning()
            assert (await poll_until(c, 1))[0] == b"0-0"
            found = await c.offsets_for_times({tp: 2500, TopicPartition(topic, 0): 2500})
            hit = found[tp]
            assert hit is not None and hit.offset == 20
            assert (await c.offsets_for_times({tp: 10**13}))[tp] is None
            c.seek(tp, hit.offset)
            assert await poll_until(c, 2) == [b"2-0", b"2-1"]
            batches = await c.poll_batches(timeout_ms=2000)
            assert batches[0].offsets().tolist()[0] == 22
            assert await c.end_offsets([tp]) == {tp: 30}
            assert await c.beginning_offsets([tp]) == {tp: 0}
            with pytest.raises(IllegalStateError):
                c.seek(TopicPartition(topic, 5), 0)

    run(body)


def test_auto_offset_reset_policies(cluster: Any) -> None:
    boot = cluster.bootstrap
    topic = "resets"
    tp = TopicPartition(topic, 0)

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic(topic, 1)
        async with AsyncProducer(boot) as p:
            await (await p.send_many(topic, [b"a", b"b"]))
        async with AsyncConsumer(boot, auto_offset_reset="none") as c:
            c.assign([tp])
            with pytest.raises(NoOffsetForPartitionError):
                await c.poll(timeout_ms=100)
        async with AsyncConsumer(boot, auto_offset_reset="latest") as c:
            c.assign([tp])
            assert await c.position(tp) == 2
        async with AsyncConsumer(boot, auto_offset_reset="earliest") as c:
            c.assign([tp])
            c.seek(tp, 1000)  # past the end: OFFSET_OUT_OF_RANGE -> reset to earliest
            assert await poll_until(c, 2) == [b"a", b"b"]

    run(body)


def test_non_retriable_error_surfaces_at_once(cluster: Any) -> None:
    boot = cluster.bootstrap
    topic = "small-messages"

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic(topic, 1, 1, {"max.message.bytes": "1024"})
        async with AsyncProducer(boot, delivery_timeout_ms=120_000) as p:
            t0 = time.monotonic()
            fut = await p.send(topic, b"x" * 5000)
            with pytest.raises(MessageTooLargeError):
                await fut
            assert time.monotonic() - t0 < 10  # not retried until the delivery timeout
            ok = await (await p.send(topic, b"small"))
            assert ok.offset == 0

    run(body)


def test_altered_topic_config_takes_effect_on_the_broker(cluster: Any) -> None:
    """`topics alter --config` reaches hosted partitions through UpdateMetadata (no restart,
    no LeaderAndIsr): a 5 KB record that fits is refused once max.message.bytes drops."""
    boot = cluster.bootstrap
    topic = "altered-config"

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic(topic, 1, 1)
            async with AsyncProducer(boot, retries=0) as p:
                assert (await (await p.send(topic, b"x" * 5000))).offset == 0
                await admin.alter_topic_configs(topic, {"max.message.bytes": "1024"})
                deadline = time.monotonic() + 20
                while True:
                    try:
                        await (await p.send(topic, b"x" * 5000))
                    except MessageTooLargeError:
                        break
                    assert time.monotonic() < deadline, "the altered config never applied"
                    await asyncio.sleep(0.1)

    run(body)


def test_admin_operations_and_typed_errors(cluster: Any) -> None:
    boot = cluster.bootstrap

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic("adm", 2, 1, {"retention.ms": "60000"})
            with pytest.raises(TopicAlreadyExistsError):
                await admin.create_topic("adm", 2)
            with pytest.raises(InvalidConfigError):
                await admin.create_topic("adm-bad", 1, 1, {"retention.ms": "soon"})
            cluster_desc = await admin.describe_cluster()
            assert cluster_desc.controller_id >= 0 and len(cluster_desc.brokers) == 1

            async def described() -> Any:
                [d] = await admin.describe_topics(["adm"])
                return d if all(p.leader >= 0 for p in d.partitions) else None

            deadline = time.monotonic() + 20
            d = None
            while d is None and time.monotonic() < deadline:
                try:
                    d = await described()
                except UnknownTopicOrPartitionError:
                    d = None
                if d is None:
                    await asyncio.sleep(0.1)
            assert d is not None and len(d.partitions) == 2
            assert d.configs.get("retention.ms") == "60000"
            await admin.create_partitions("adm", 4)
            with pytest.raises(InvalidPartitionsError):
                await admin.create_partitions("adm", 1)
            await admin.alter_topic_configs("adm", {"retention.bytes": "1000000"}, ["retention.ms"])
            assert "adm" in await admin.list_topics()
            offs = await admin.list_offsets({TopicPartition("adm", 0): "latest"})
            assert offs[TopicPartition("adm", 0)].offset == 0
            await admin.delete_topics(["adm"])
            with pytest.raises(UnknownTopicOrPartitionError):
                await admin.delete_topics(["adm"])

    run(body)


def test_blocking_facades(cluster: Any) -> None:
    boot = cluster.bootstrap
    with AdminClient(boot) as admin:
        admin.create_topic("sync", 1)
    with Producer(boot, linger_ms=1) as p:
        futs = [p.send("sync", b"r%d" % i) for i in range(100)]
        group = p.send_many("sync", [b"m%d" % i for i in range(100)])
        p.flush()
        offsets = [f.result(timeout=10).offset for f in futs]
        assert offsets == list(range(100))
        assert group.result(timeout=10).ranges[0].base_offset == 100
    with Consumer(boot, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("sync", 0)])
        got: list[bytes | None] = []
        deadline = time.monotonic() + 20
        while len(got) < 200 and time.monotonic() < deadline:
            got.extend(r.value for r in c.poll(timeout_ms=300, max_records=1000))
        assert got[:2] == [b"r0", b"r1"] and got[-1] == b"m99" and len(got) == 200
        assert c.position(TopicPartition("sync", 0)) == 200
        # a bad max_records is refused at once, by both calls, and moves nothing
        c.seek(TopicPartition("sync", 0), 150)
        for bad in (0, -1):
            with pytest.raises(InvalidRequestError, match="max_records"):
                c.poll(timeout_ms=5000, max_records=bad)
        with pytest.raises(InvalidRequestError, match="max_records"):
            c.poll_batches(timeout_ms=5000, max_records=-1)
        assert c.poll_batches(timeout_ms=50, max_records=0) == []  # takes nothing
        assert c.position(TopicPartition("sync", 0)) == 150
        again = c.poll(timeout_ms=5000, max_records=3)
        assert [(r.topic, r.partition, r.offset, r.value) for r in again] == [
            ("sync", 0, 150, b"m50"),
            ("sync", 0, 151, b"m51"),
            ("sync", 0, 152, b"m52"),
        ]
