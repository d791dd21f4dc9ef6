"""Shared steps of the scenario tests: run a workload against faults, heal, read, check.

A scenario is: create the topic, start producer processes recording into a history, run the
nemesis coroutine (the faults, with bounded waits on the cluster's state between them),
stop the workload, wait until the partitions are healthy again (every replica back in the
ISR), read everything back (consumer up to the HW, and every broker's on-disk copy), check,
print the summary and return the report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from headwater.client import AsyncAdminClient
from tests.fault.harness.checker import Report, check
from tests.fault.harness.cluster import FaultCluster, wait_partition
from tests.fault.harness.history import History
from tests.fault.harness.replicas import replica_logs, replica_reads
from tests.fault.harness.workload import ProducerWorkload, read_all
from tests.helpers.wait import async_wait_for


async def create_topic(
    cluster: FaultCluster,
    topic: str,
    *,
    partitions: int = 1,
    rf: int = 3,
    configs: Mapping[str, str] | None = None,
) -> None:
    async with AsyncAdminClient(cluster.live_bootstrap()) as admin:
        await admin.create_topic(topic, partitions, rf, dict(configs or {}))
    for p in range(partitions):
        await wait_partition(
            cluster.etcd.endpoint,
            topic,
            p,
            lambda s: s["leader"] >= 0 and len(s["isr"]) == rf,
            timeout=30,
            what=f"{topic}/{p} to have a leader and a full ISR",
        )


async def wait_full_isr(
    cluster: FaultCluster, topic: str, partitions: Sequence[int], rf: int, timeout: float = 60
) -> None:
    for p in partitions:
        await wait_partition(
            cluster.etcd.endpoint,
            topic,
            p,
            lambda s: s["leader"] >= 0 and len(s["isr"]) == rf,
            timeout=timeout,
            what=f"{topic}/{p} to recover a full ISR of {rf}",
        )


async def wait_ok(wl: ProducerWorkload, more: int, *, timeout: float, what: str) -> None:
    target = wl.stats.ok + more

    async def reached() -> bool:
        return wl.stats.ok >= target

    try:
        await async_wait_for(reached, timeout=timeout, what=what)
    except AssertionError as exc:
        errs = [op.error for op in wl.history.ops if op.error][-5:]
        raise AssertionError(f"{exc}; workload {wl.stats}, last errors {errs}") from None


async def run_scenario(
    cluster: FaultCluster,
    topic: str,
    partitions: Sequence[int],
    nemesis: Callable[[ProducerWorkload], Awaitable[Any]],
    *,
    rf: int = 3,
    acks: int | str = "all",
    processes: int = 4,
    max_writes: int = 4000,
    heal_timeout: float = 60,
) -> Report:
    """Workload + ``nemesis(workload)`` + heal + final read + check (see module doc)."""
    history = History()
    cluster.history = history
    wl = ProducerWorkload(
        history,
        cluster.live_bootstrap(),
        topic,
        partitions=partitions,
        processes=processes,
        acks=acks,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(wl.run(stop, max_writes=max_writes))
    try:
        await nemesis(wl)
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
    await wait_full_isr(cluster, topic, partitions, rf, timeout=heal_timeout)
    return await final_check(cluster, history, topic, partitions)


async def final_check(
    cluster: FaultCluster, history: History, topic: str, partitions: Sequence[int]
) -> Report:
    reads, hws = await read_all(cluster.live_bootstrap(), topic, partitions, timeout=60)
    brokers = list(cluster.brokers)
    reads += replica_reads(cluster.data_dir, brokers, topic, hws)
    report = check(
        history.ops,
        reads,
        replica_logs=replica_logs(cluster.data_dir, brokers, topic, partitions),
        high_watermarks=hws,
    )
    print(f"\n[{topic}] high watermarks {hws}\n{report.summary()}")
    return report


def assert_no_loss(report: Report, *, min_acknowledged: int = 1) -> None:
    headline = report.summary().splitlines()[0]
    assert headline == f"acknowledged records lost: 0 of {report.acknowledged}", report.summary()
    assert report.valid, report.summary()
    assert report.acknowledged >= min_acknowledged, report.summary()
