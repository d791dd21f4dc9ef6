"""A consumer group rebalances when a subscribed topic gains partitions (issue 4).

Real processes: etcd, a controller, one broker, 2 coordinators (their ``coordinator-topic-watch``
task checks partition counts every 500 ms). One AsyncConsumer member subscribed to a
2-partition topic; after ``create_partitions(topic, 4)`` the coordinator moves the Stable
group to PreparingRebalance, the member rejoins and gets all 4 partitions, and a record
produced to the new partition 3 is consumed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer, RebalanceListener
from headwater.client.types import TopicPartition
from headwater.dev.cluster import LocalCluster
from tests.helpers.wait import async_wait_for


@pytest.fixture(scope="module")
def gcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("groups-growth")
    with LocalCluster(
        data_dir,
        brokers=1,
        controllers=1,
        coordinators=2,
        coordinator_args=[
            "--offsets-topic-partitions",
            "3",
            "--lease-ttl",
            "2",
            "--topic-watch-interval-ms",
            "500",
        ],
        etcd_unsafe_no_fsync=True,
    ) as c:
        yield c


def parts(topic: str, n: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, p) for p in range(n))


def test_member_gets_new_partitions_after_create_partitions(gcluster: LocalCluster) -> None:
    boot, topic = gcluster.bootstrap, "growing"

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic(topic, 2)
        c = AsyncConsumer(
            boot,
            group_id="g-growth",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=3000,
            heartbeat_interval_ms=300,
            client_id="grower",
        )
        assigned: list[frozenset[TopicPartition]] = []
        records: list[tuple[TopicPartition, bytes | None]] = []
        errors: list[BaseException] = []

        async def run() -> None:
            try:
                while True:
                    for r in await c.poll(timeout_ms=200):
                        records.append((TopicPartition(r.topic, r.partition), r.value))
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                errors.append(exc)

        c.subscribe(
            [topic],
            listener=RebalanceListener(
                on_assigned=lambda _tps: assigned.append(frozenset(c.assignment()))
            ),
        )
        task = asyncio.get_running_loop().create_task(run(), name="grower")
        try:

            async def has(n: int) -> bool:
                assert not errors, errors
                return bool(assigned) and assigned[-1] == parts(topic, n)

            await async_wait_for(lambda: has(2), timeout=60, what="assigned {0,1}")
            gen_before = c.generation
            async with AsyncAdminClient(boot) as admin:
                await admin.create_partitions(topic, 4)
            t0 = time.monotonic()
            await async_wait_for(lambda: has(4), timeout=20, what="assigned {0,1,2,3}")
            assert c.generation > gen_before
            print(f"rebalanced onto 4 partitions {time.monotonic() - t0:.2f}s after growth")
            async with AsyncProducer(boot) as p:
                await (await p.send(topic, b"on-3", partition=3))

            async def got_it() -> bool:
                assert not errors, errors
                return (TopicPartition(topic, 3), b"on-3") in records

            await async_wait_for(got_it, timeout=20, what="the record on partition 3 consumed")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await c.close()

    asyncio.run(body())
