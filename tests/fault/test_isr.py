"""ISR scenarios (RF=3, min.insync.replicas=2), every broker-to-broker link behind a proxy:

* the ISR shrinks to the leader (its replication links are cut), then the leader is cut off
  for good (kill -9): while alone it refuses acks=all writes with NOT_ENOUGH_REPLICAS (a
  definite failure) and acknowledges nothing; with unclean election disabled the partition
  stays offline until that leader returns, and nothing acknowledged is lost;
* the last replica standing has lost its unflushed tail: it is outside the ISR and is not
  elected while the ISR members are down (the partition stays offline); once an ISR member
  returns it leads, the short replica catches up, nothing acknowledged is lost;
* the acks x ISR-size matrix: which writes succeed with acks 0/1/all when the ISR has 3, 2
  or 1 members, and that acks=1 writes taken while the ISR is below min.insync stay invisible
  (the high watermark does not move) until the replicas return.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.client import AsyncConsumer, TopicPartition
from tests.fault.harness.cluster import FaultCluster, partition_state, wait_partition
from tests.fault.harness.history import History
from tests.fault.harness.replicas import partition_dir, stored_batches
from tests.fault.harness.workload import ProducerWorkload
from tests.fault.scenario import (
    assert_no_loss,
    create_topic,
    final_check,
    wait_full_isr,
    wait_ok,
)

CONFIGS = {"min.insync.replicas": "2"}
_PROCESS_IDS = itertools.count(10)


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    data: Path = tmp_path_factory.mktemp("isr")
    with FaultCluster(
        data,
        brokers=3,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        peer_proxies=True,
        broker_args=["--replica-lag-time-max-ms", "1500"],
    ) as c:
        yield c


async def _state(fc: FaultCluster, topic: str) -> dict[str, object]:
    s = await partition_state(fc.etcd.endpoint, topic, 0)
    assert s is not None
    return s


async def _produce_batch(
    fc: FaultCluster, history: History, topic: str, acks: str, n: int, prefix: str
) -> ProducerWorkload:
    """``n`` writes by one process (awaiting each), recorded in ``history``."""
    wl = ProducerWorkload(
        history,
        fc.live_bootstrap(),
        topic,
        partitions=[0],
        processes=1,
        acks=acks,
        prefix=prefix,
        first_process=next(_PROCESS_IDS),
    )
    await asyncio.wait_for(wl.run(asyncio.Event(), max_writes=n), 60)
    return wl


async def _hw(fc: FaultCluster, topic: str) -> int:
    c = AsyncConsumer(fc.live_bootstrap())
    try:
        ends = await c.end_offsets([TopicPartition(topic, 0)])
    finally:
        await c.close()
    return next(iter(ends.values()))


async def _wait_failures(wl: ProducerWorkload, fails: int) -> None:
    deadline = time.monotonic() + 30
    while wl.stats.fail < fails:
        assert time.monotonic() < deadline, f"expected NOT_ENOUGH_REPLICAS failures: {wl.stats}"
        await asyncio.sleep(0.05)


def test_isr_shrinks_to_leader_then_leader_cut_off(fc: FaultCluster) -> None:
    topic = "shrink"

    async def run() -> None:
        await create_topic(fc, topic, configs=CONFIGS)
        history = History()
        fc.history = history
        wl = ProducerWorkload(history, fc.live_bootstrap(), topic, partitions=[0])
        stop = asyncio.Event()
        task = asyncio.create_task(wl.run(stop, max_writes=5000))
        try:
            await wait_ok(wl, 300, timeout=60, what="writes with a full ISR")
            leader = int((await _state(fc, topic))["leader"])  # type: ignore[call-overload]
            fc.isolate_broker(leader)  # followers can no longer fetch from it
            await wait_partition(
                fc.etcd.endpoint,
                topic,
                0,
                lambda s: s["isr"] == [leader],
                timeout=30,
                what="the ISR to shrink to the leader alone",
            )
            ok_alone = wl.stats.ok
            fail_alone = wl.stats.fail
            await _wait_failures(wl, fail_alone + 20)
            # alone, the leader refuses acks=all writes before appending and acknowledges none
            assert wl.stats.ok == ok_alone, "a write was acknowledged by a leader alone in its ISR"
            fc.kill_broker(leader)  # cut off for good
            await wait_partition(
                fc.etcd.endpoint,
                topic,
                0,
                lambda s: s["leader"] == -1,
                timeout=30,
                what="the partition to go offline (no ISR member alive, unclean disabled)",
            )
            fc.heal_links()
            await asyncio.to_thread(fc.restart_broker, leader)
            await wait_partition(
                fc.etcd.endpoint,
                topic,
                0,
                lambda s: s["leader"] == leader,
                timeout=40,
                what="the last ISR member to lead again",
            )
            await wait_ok(wl, 100, timeout=60, what="writes after recovery")
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)
        await wait_full_isr(fc, topic, [0], 3)
        report = await final_check(fc, history, topic, [0])
        assert_no_loss(report, min_acknowledged=400)
        assert report.errors.get("fail NOT_ENOUGH_REPLICAS", 0) >= 20, report.errors

    asyncio.run(run())


def _lose_tail(fc: FaultCluster, bid: int, topic: str) -> tuple[int, int]:
    """Simulate a power loss on a stopped broker: cut its log to half its batches, drop the
    indexes and the recovery point (they described the lost bytes). Returns (old, new) end."""
    pdir = partition_dir(fc.data_dir, bid, topic, 0)
    assert pdir is not None
    batches = [info for info, _raw in stored_batches(pdir)]
    assert len(batches) >= 4, f"broker {bid} holds only {len(batches)} batches"
    keep = batches[: len(batches) // 2]
    segs = sorted(pdir.glob("*.log"), key=lambda f: int(f.stem))
    bases = [int(f.stem) for f in segs] + [2**63]
    for k, seg in enumerate(segs):
        size = sum(b.size for b in keep if bases[k] <= b.base_offset < bases[k + 1])
        if size == 0 and k > 0:
            seg.unlink()
        else:
            with open(seg, "r+b") as f:
                f.truncate(size)
        for ext in (".index", ".timeindex"):
            seg.with_suffix(ext).unlink(missing_ok=True)
    cp = pdir / "partition.checkpoint"
    if cp.exists():
        doc = json.loads(cp.read_text())
        doc["recovery_point"] = 0
        cp.write_text(json.dumps(doc))
    (pdir / ".clean_shutdown").unlink(missing_ok=True)
    return batches[-1].last_offset + 1, keep[-1].last_offset + 1


def test_last_replica_standing_with_lost_tail_is_not_elected(fc: FaultCluster) -> None:
    topic = "tail"

    async def run() -> None:
        await create_topic(fc, topic, configs=CONFIGS)
        history = History()
        fc.history = history
        wl = ProducerWorkload(history, fc.live_bootstrap(), topic, partitions=[0])
        stop = asyncio.Event()
        task = asyncio.create_task(wl.run(stop, max_writes=4000))
        try:
            await wait_ok(wl, 300, timeout=60, what="writes with a full ISR")
            s = await _state(fc, topic)
            leader = int(s["leader"])  # type: ignore[call-overload]
            a, b = [x for x in (1, 2, 3) if x != leader]
            fc.kill_broker(a)  # a leaves the ISR; the others keep committing without it
            await wait_partition(
                fc.etcd.endpoint, topic, 0, lambda s: a not in s["isr"], timeout=30, what="shrink"
            )
            await wait_ok(wl, 200, timeout=60, what="writes committed without broker a")
            fc.kill_broker(leader)
            fc.kill_broker(b)
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)
        await wait_partition(
            fc.etcd.endpoint,
            topic,
            0,
            lambda s: s["leader"] == -1,
            timeout=40,
            what="the partition to go offline",
        )
        # Which of the two killed ISR members is left as the ISR depends on which lease the
        # controller saw expire first (the other was shrunk out while the first still lived,
        # or was elected and then lost): either way one of them, never broker a.
        offline = await _state(fc, topic)
        (last_isr_member,) = offline["isr"]  # type: ignore[misc]
        assert last_isr_member in (leader, b), offline
        other = b if last_isr_member == leader else leader
        old_end, new_end = _lose_tail(fc, a, topic)
        print(f"broker {a} (outside the ISR) lost its tail: log end {old_end} -> {new_end}")
        await asyncio.to_thread(fc.restart_broker, a)
        # the only live replica is outside the ISR: it must not be elected
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            st = await _state(fc, topic)
            assert st["leader"] == -1, f"broker {a} with a lost tail was elected: {st}"
            await asyncio.sleep(0.2)
        await asyncio.to_thread(fc.restart_broker, last_isr_member)  # the ISR member returns
        await wait_partition(
            fc.etcd.endpoint,
            topic,
            0,
            lambda s: s["leader"] == last_isr_member,
            timeout=40,
            what=f"ISR member {last_isr_member} to lead",
        )
        await asyncio.to_thread(fc.restart_broker, other)
        await wait_full_isr(fc, topic, [0], 3)
        report = await final_check(fc, history, topic, [0])
        assert_no_loss(report, min_acknowledged=500)

    asyncio.run(run())


def test_acks_isr_size_matrix(fc: FaultCluster) -> None:
    topic = "matrix"
    n = 10

    async def run() -> None:
        await create_topic(fc, topic, configs=CONFIGS)
        history = History()
        fc.history = history
        leader = int((await _state(fc, topic))["leader"])  # type: ignore[call-overload]
        followers = [x for x in (1, 2, 3) if x != leader]
        table: dict[tuple[int, str], tuple[int, int, int]] = {}
        hw_frozen = None
        for isr_size in (3, 2, 1):
            if isr_size < 3:
                fc.kill_broker(followers[3 - isr_size - 1])

                def shrunk(s: dict[str, Any], k: int = isr_size) -> bool:
                    return len(s["isr"]) == k and bool(s["leader"] == leader)

                await wait_partition(
                    fc.etcd.endpoint, topic, 0, shrunk, timeout=30, what=f"an ISR of {isr_size}"
                )
            hw_before = await _hw(fc, topic)
            for acks in ("0", "1", "all"):
                wl = await _produce_batch(fc, history, topic, acks, n, f"m{isr_size}a{acks}")
                table[(isr_size, acks)] = (wl.stats.ok, wl.stats.fail, wl.stats.info)
            if isr_size == 1:
                hw_frozen = (hw_before, await _hw(fc, topic))
        for (isr_size, acks), (ok, fail, info) in sorted(table.items()):
            print(f"ISR {isr_size} acks={acks:>3}: ok {ok:2d} fail {fail:2d} unknown {info:2d}")
        for isr_size in (3, 2, 1):
            assert table[(isr_size, "0")] == (0, 0, n)  # nothing is acknowledged with acks=0
            assert table[(isr_size, "1")] == (n, 0, 0)
        assert table[(3, "all")] == (n, 0, 0) and table[(2, "all")] == (n, 0, 0)
        assert table[(1, "all")] == (0, n, 0)  # NOT_ENOUGH_REPLICAS, before the append
        # below min.insync the high watermark stands still: acks=0/1 writes stay invisible
        assert hw_frozen is not None and hw_frozen[0] == hw_frozen[1], hw_frozen
        for f in followers:
            await asyncio.to_thread(fc.restart_broker, f)
        await wait_full_isr(fc, topic, [0], 3)
        report = await final_check(fc, history, topic, [0])
        assert_no_loss(report, min_acknowledged=5 * n)

    asyncio.run(run())
