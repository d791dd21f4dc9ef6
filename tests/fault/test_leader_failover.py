"""Leader failures under acks=all (RF=3, min.insync.replicas=2), each checked by the history
checker ("acknowledged records lost: 0 of N", no duplicates, reorders, inconsistent offsets
or divergent replicas):

* a kill -9 storm: the leader is killed and restarted several times while producing;
* fast double failovers (KIP-101/279): the new leader is killed right after its election,
  before the old one is back; afterwards every replica's log is byte-identical;
* a paused (SIGSTOP) leader outlives its lease, is replaced, and is resumed (SIGCONT) while
  a producer that only knows it keeps writing to it: it acknowledges nothing it then loses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fault.harness.cluster import FaultCluster, partition_state, wait_partition
from tests.fault.harness.history import History
from tests.fault.harness.replicas import log_prefix_bytes, partition_dir, stored_batches
from tests.fault.harness.workload import ProducerWorkload
from tests.fault.scenario import (
    assert_no_loss,
    create_topic,
    final_check,
    run_scenario,
    wait_full_isr,
    wait_ok,
)
from tests.helpers.wait import async_wait_for

CONFIGS = {"min.insync.replicas": "2"}


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    data: Path = tmp_path_factory.mktemp("failover")
    with FaultCluster(
        data,
        brokers=3,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--replica-lag-time-max-ms", "2000"],
    ) as c:
        yield c


async def _leader(fc: FaultCluster, topic: str, p: int = 0) -> int:
    s = await wait_partition(
        fc.etcd.endpoint, topic, p, lambda s: s["leader"] >= 0, timeout=30, what="a leader"
    )
    return int(s["leader"])


async def _failed_over(fc: FaultCluster, topic: str, old: int, p: int = 0) -> int:
    s = await wait_partition(
        fc.etcd.endpoint,
        topic,
        p,
        lambda s: s["leader"] not in (-1, old),
        timeout=40,
        what=f"{topic}/{p} to elect a leader other than broker {old}",
    )
    return int(s["leader"])


async def _restart(fc: FaultCluster, bid: int) -> None:
    await asyncio.to_thread(fc.restart_broker, bid)


def test_leader_kill9_storm_acks_all(fc: FaultCluster) -> None:
    topic = "storm"

    async def nemesis(wl: ProducerWorkload) -> None:
        for round_ in range(3):
            await wait_ok(wl, 150, timeout=60, what=f"writes before kill {round_}")
            old = await _leader(fc, topic)
            fc.kill_broker(old)
            await _failed_over(fc, topic, old)
            await _restart(fc, old)
        await wait_ok(wl, 150, timeout=60, what="writes after the storm")

    async def run() -> None:
        await create_topic(fc, topic, configs=CONFIGS)
        report = await run_scenario(fc, topic, [0], nemesis, max_writes=6000)
        assert_no_loss(report, min_acknowledged=600)

    asyncio.run(run())


def _whole_logs_identical(fc: FaultCluster, topic: str) -> dict[int, int]:
    """Every replica's complete log has the same bytes; returns broker -> log end offset."""
    ends: dict[int, int] = {}
    blobs: dict[int, bytes] = {}
    for b in fc.brokers:
        pdir = partition_dir(fc.data_dir, b, topic, 0)
        assert pdir is not None, f"broker {b} has no copy of {topic}-0"
        batches = stored_batches(pdir)
        ends[b] = batches[-1][0].last_offset + 1 if batches else 0
        blobs[b] = log_prefix_bytes(pdir, ends[b])
    return ends if len(set(blobs.values())) == 1 and len(set(ends.values())) == 1 else {}


def test_fast_double_failover_logs_identical(fc: FaultCluster) -> None:
    topic = "double"

    async def nemesis(wl: ProducerWorkload) -> None:
        for round_ in range(2):
            await wait_ok(wl, 150, timeout=60, what=f"writes before double failover {round_}")
            first = await _leader(fc, topic)
            fc.kill_broker(first)
            second = await _failed_over(fc, topic, first)
            fc.kill_broker(second)  # at once: the first is still down
            await _restart(fc, first)
            await _restart(fc, second)
            await wait_full_isr(fc, topic, [0], 3)

    async def run() -> None:
        await create_topic(fc, topic, configs=CONFIGS)
        report = await run_scenario(fc, topic, [0], nemesis, max_writes=5000)
        assert_no_loss(report, min_acknowledged=300)

        async def identical() -> dict[int, int]:
            return _whole_logs_identical(fc, topic)

        ends = await async_wait_for(identical, timeout=30, what="byte-identical replica logs")
        print(f"replica logs byte-identical, log end offsets {ends}")

    asyncio.run(run())


def test_paused_leader_outliving_its_lease_acknowledges_nothing_lost(fc: FaultCluster) -> None:
    topic = "paused"

    async def run() -> None:
        await create_topic(fc, topic, configs=CONFIGS)
        history = History()
        fc.history = history
        main = ProducerWorkload(history, fc.live_bootstrap(), topic, partitions=[0])
        old = await _leader(fc, topic)
        # a client that knows only the old leader: its metadata comes from that broker alone
        stale = ProducerWorkload(
            history,
            fc.brokers[old].address,
            topic,
            partitions=[0],
            processes=2,
            prefix="s",
            first_process=100,
            metadata_max_age_ms=60_000,
        )
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(main.run(stop, max_writes=4000)),
            asyncio.create_task(stale.run(stop, max_writes=2000)),
        ]
        try:
            await wait_ok(main, 200, timeout=60, what="writes before the pause")
            fc.pause_broker(old)
            new = await _failed_over(fc, topic, old)
            await wait_ok(main, 200, timeout=60, what=f"writes through the new leader {new}")
            stale_ok = stale.stats.ok
            fc.resume_broker(old)  # it wakes up believing it leads
            resumed_at = len(history)
            await wait_partition(
                fc.etcd.endpoint,
                topic,
                0,
                lambda s: old in s["isr"],
                timeout=60,
                what=f"broker {old} to rejoin the ISR as a follower",
            )
            await wait_ok(main, 100, timeout=60, what="writes after the old leader returned")
            state = await partition_state(fc.etcd.endpoint, topic, 0)
            assert state is not None and state["leader"] == new

            # the stale client writes to the resumed broker (what the checker then judges); its
            # writers may still be waiting out requests sent during the pause, so wait for it
            async def stale_wrote_after_resume() -> bool:
                return any(
                    op.process >= 100 and op.type == "invoke" for op in history.ops[resumed_at:]
                )

            await async_wait_for(
                stale_wrote_after_resume, timeout=60, what="a stale-client write after the resume"
            )
            print(f"stale client: ok {stale_ok} before resume, {stale.stats.ok} at the end")
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
        await wait_full_isr(fc, topic, [0], 3)
        report = await final_check(fc, history, topic, [0])
        assert_no_loss(report, min_acknowledged=500)

    asyncio.run(run())
