"""The harness end to end on a real cluster: producer processes record a history while the only
broker is paused (SIGSTOP) and resumed; the final reader, the on-disk replica reader and the
checker agree that nothing acknowledged was lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from headwater.client import AsyncAdminClient
from tests.fault.harness.checker import check
from tests.fault.harness.cluster import FaultCluster
from tests.fault.harness.history import History
from tests.fault.harness.replicas import replica_logs, replica_reads
from tests.fault.harness.workload import ProducerWorkload, read_all
from tests.helpers.wait import async_wait_for

TOPIC = "harness"


def test_history_survives_a_paused_broker(tmp_path_factory: pytest.TempPathFactory) -> None:
    data: Path = tmp_path_factory.mktemp("harness")
    with FaultCluster(data, brokers=1, controllers=1, etcd_unsafe_no_fsync=True) as cluster:
        history = History()
        cluster.history = history

        async def run() -> None:
            async with AsyncAdminClient(cluster.bootstrap) as admin:
                await admin.create_topic(TOPIC, partitions=2, replication_factor=1)
            wl = ProducerWorkload(
                history, cluster.bootstrap, TOPIC, partitions=[0, 1], request_timeout_ms=1500
            )
            stop = asyncio.Event()
            task = asyncio.create_task(wl.run(stop, max_writes=3000))
            await async_wait_for(
                lambda: _ready(wl.stats.ok >= 300), timeout=30, what="300 acknowledged writes"
            )
            cluster.pause_broker(1)
            # writes in flight during the pause end as unknown (timeout), never as ok-then-lost
            await async_wait_for(
                lambda: _ready(wl.stats.info >= 1), timeout=30, what="a write to time out"
            )
            cluster.resume_broker(1)
            ok_before = wl.stats.ok
            await async_wait_for(
                lambda: _ready(wl.stats.ok >= ok_before + 300),
                timeout=30,
                what="writes to succeed after SIGCONT",
            )
            stop.set()
            await asyncio.wait_for(task, 60)
            reads, hws = await read_all(cluster.bootstrap, TOPIC, [0, 1], timeout=30)
            reads += replica_reads(data, [1], TOPIC, hws)
            report = check(
                history.ops,
                reads,
                replica_logs=replica_logs(data, [1], TOPIC, [0, 1]),
                high_watermarks=hws,
            )
            print(report.summary())
            headline = report.summary().splitlines()[0]
            assert headline == f"acknowledged records lost: 0 of {report.acknowledged}"
            assert report.valid, report.summary()
            assert report.acknowledged >= 600 and report.unknown >= 1
            assert any(op.f == "pause" for op in history.ops)

        asyncio.run(run())


async def _ready(flag: bool) -> bool:
    return flag
