"""Controller kill -9 (two controllers):

* during topic creation: every topic ends up whole (all partitions with a live leader and a
  full ISR) or absent, a retry of the creation settles it, and the topics then carry writes
  without losing any acknowledged one;
* during a broker failure: the leader broker and the active controller are killed together;
  the standby takes over and moves leadership to live ISR members; nothing acknowledged is
  lost.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater import errors
from headwater.client import AsyncAdminClient
from tests.fault.harness.cluster import (
    FaultCluster,
    active_controller,
    topic_states,
    wait_partition,
)
from tests.fault.harness.workload import ProducerWorkload
from tests.fault.scenario import (
    assert_no_loss,
    create_topic,
    run_scenario,
    wait_full_isr,
    wait_ok,
)
from tests.helpers.wait import async_wait_for


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    data: Path = tmp_path_factory.mktemp("ctlfaults")
    with FaultCluster(
        data, brokers=3, controllers=2, etcd_unsafe_no_fsync=True, controller_lease_ttl=3
    ) as c:
        yield c


async def _new_active(fc: FaultCluster, not_id: int) -> int:
    async def found() -> int | None:
        cid = await active_controller(fc.etcd.endpoint)
        return cid if cid is not None and cid != not_id else None

    return await async_wait_for(found, timeout=30, what="a standby controller to take over")


async def _create_retrying(fc: FaultCluster, name: str) -> str:
    """Create ``name`` until the controller answers: "created" or "existed"."""

    async def attempt() -> str | None:
        async with AsyncAdminClient(fc.live_bootstrap(), request_timeout_ms=5000) as admin:
            try:
                await admin.create_topic(name, 3, 3, {"min.insync.replicas": "2"})
                return "created"
            except errors.TopicAlreadyExistsError:
                return "existed"

    return await async_wait_for(attempt, timeout=45, what=f"creating {name} after failover")


def test_controller_kill9_during_topic_creation(fc: FaultCluster) -> None:
    names = [f"cc-{i}" for i in range(30)]

    async def run() -> None:
        old = await active_controller(fc.etcd.endpoint)
        assert old is not None
        outcomes: dict[str, str] = {}

        async def create_all() -> None:  # one request per topic, in sequence
            async with AsyncAdminClient(fc.live_bootstrap(), request_timeout_ms=5000) as admin:
                for n in names:
                    try:
                        await admin.create_topic(n, 3, 3, {"min.insync.replicas": "2"})
                        outcomes[n] = "created"
                    except errors.HeadwaterError as exc:
                        outcomes[n] = exc.code_name()

        creating = asyncio.create_task(create_all())

        async def underway() -> bool:
            return bool(await topic_states(fc.etcd.endpoint, names[3])) or creating.done()

        await async_wait_for(underway, timeout=30, what="topic creation to be under way")
        last_existed = bool(await topic_states(fc.etcd.endpoint, names[-1]))
        fc.kill_controller(old)  # the first topics exist, the rest do not yet
        await asyncio.wait_for(creating, 120)
        new = await _new_active(fc, old)
        print(
            f"controller {old} killed, {new} took over; first answers: "
            f"{sorted(Counter(outcomes.values()).items())}"
        )
        assert not last_existed, "the kill came after the whole creation"
        for n in names:
            await _create_retrying(fc, n)
        for n in names:
            await wait_full_isr(fc, n, range(3), 3, timeout=30)
            states = await topic_states(fc.etcd.endpoint, n)
            assert sorted(states) == [0, 1, 2], (n, states)
        fc.restart_controller(old)
        report = await run_scenario(
            fc,
            names[-1],
            [0, 1, 2],
            lambda wl: wait_ok(wl, 600, timeout=60, what="600 acknowledged writes"),
            max_writes=1500,
        )
        assert_no_loss(report, min_acknowledged=600)

    asyncio.run(run())


def test_controller_kill9_during_broker_failure(fc: FaultCluster) -> None:
    topic = "ctl-broker"

    async def nemesis(wl: ProducerWorkload) -> None:
        await wait_ok(wl, 300, timeout=60, what="writes before the faults")
        states = await topic_states(fc.etcd.endpoint, topic)
        victim = int(states[0]["leader"])
        ctl = await active_controller(fc.etcd.endpoint)
        assert ctl is not None
        fc.kill_broker(victim)
        fc.kill_controller(ctl)  # the failover must be carried out by the standby
        await _new_active(fc, ctl)
        for p in (0, 1, 2):
            await wait_partition(
                fc.etcd.endpoint,
                topic,
                p,
                lambda s: s["leader"] not in (-1, victim),
                timeout=40,
                what=f"{topic}/{p} led by a live broker",
            )
        await wait_ok(wl, 200, timeout=60, what="writes after the failover")
        await asyncio.to_thread(fc.restart_controller, ctl)
        await asyncio.to_thread(fc.restart_broker, victim)

    async def run() -> None:
        await create_topic(fc, topic, partitions=3, configs={"min.insync.replicas": "2"})
        report = await run_scenario(fc, topic, [0, 1, 2], nemesis, max_writes=4000)
        assert_no_loss(report, min_acknowledged=500)

    asyncio.run(run())
