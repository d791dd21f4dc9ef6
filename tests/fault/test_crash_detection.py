"""Crash detection (issue 17 item 3) with real processes and a long broker lease (30 s), so
that anything bounded by half the lease cannot have been the lease's doing:

* kill -9 of a leader: its registration goes, a new leader is elected and acks=all writes are
  acknowledged again within half the lease (bounded waits on events), and no acknowledged
  record is lost (history checker); the controller counted one reset broker;
* SIGSTOP of a leader: no connection resets, so nothing is inferred from it: the paused
  broker keeps its registration until its lease runs out, and the controller counts no reset;
* a broker whose controller link is cut (the controller reaches it through a proxy that
  resets every connection) but that keeps running keeps its registration and its epoch, and
  serves the controller's requests again once the link heals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.client import AsyncAdminClient
from headwater.platform import etcd as hetcd
from tests.fault.harness.cluster import FaultCluster, partition_state, wait_partition
from tests.fault.harness.proxy import ProxyHub
from tests.fault.harness.workload import ProducerWorkload
from tests.fault.scenario import assert_no_loss, create_topic, run_scenario, wait_ok
from tests.helpers.wait import async_wait_for
from tests.metrics.families import scrape

LEASE_S = 30
CONFIGS = {"min.insync.replicas": "2"}
PROXIED = 3  # the broker the controller reaches through ``proxy``


@pytest.fixture(scope="module")
def hub() -> Iterator[ProxyHub]:
    h = ProxyHub()
    try:
        yield h
    finally:
        h.close()


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory, hub: ProxyHub) -> Iterator[FaultCluster]:
    data: Path = tmp_path_factory.mktemp("crash")
    holder: dict[str, FaultCluster] = {}

    def target() -> tuple[str, int] | None:
        proc = holder["c"].brokers.get(PROXIED) if "c" in holder else None
        return ("127.0.0.1", proc.port) if proc is not None and proc.port else None

    proxy = hub.link("controller->3", target)
    c = FaultCluster(
        data,
        brokers=3,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--session-timeout-s", str(LEASE_S), "--replica-lag-time-max-ms", "2000"],
        # broker 3 registers the proxy's address: the controller's link to it crosses the proxy
        broker_extra={
            PROXIED: ["--advertised-host", "127.0.0.1", "--advertised-port", str(proxy.port)]
        },
    )
    holder["c"] = c  # before start: the proxy resolves broker 3 through it
    with c:
        yield c


def _resets(fc: FaultCluster) -> float:
    url = fc.metrics_urls()["controller-1"]
    return scrape(url).value("headwater_controller_broker_resets_total")


async def _registration_epoch(fc: FaultCluster, bid: int) -> int | None:
    client = await hetcd.Etcd.connect(fc.etcd.endpoint)
    try:
        got = await client.get(f"/headwater/brokers/ids/{bid}")
    finally:
        await client.close()
    return None if got is None else got[1].create_revision


async def _leader_not(fc: FaultCluster, topic: str, avoid: set[int]) -> int:
    s = await wait_partition(
        fc.etcd.endpoint,
        topic,
        0,
        lambda s: s["leader"] >= 0 and s["leader"] not in avoid and len(s["isr"]) == 3,
        timeout=60,
        what=f"{topic}/0 led by a broker not in {avoid} with a full ISR",
    )
    return int(s["leader"])


async def _move_leader_off(fc: FaultCluster, topic: str, bid: int) -> int:
    """The topic's leader, made a broker other than ``bid`` by reassigning if needed."""
    s = await wait_partition(
        fc.etcd.endpoint, topic, 0, lambda s: s["leader"] >= 0, timeout=60, what="a leader"
    )
    if int(s["leader"]) != bid:
        return int(s["leader"])
    others = [b for b in fc.brokers if b != bid]
    async with AsyncAdminClient(fc.live_bootstrap()) as admin:
        await admin.alter_partition_reassignments({(topic, 0): [*others, bid]})

        async def moved() -> bool:  # the preferred election, until the new order is in place
            await admin.elect_leaders([(topic, 0)])
            state = await partition_state(fc.etcd.endpoint, topic, 0)
            return state is not None and state["leader"] not in (-1, bid)

        await async_wait_for(
            moved, timeout=60, interval=0.5, what=f"{topic}/0 led by a broker other than {bid}"
        )
    return await _leader_not(fc, topic, {bid})


def test_kill9_of_a_leader_fails_over_well_before_the_lease(fc: FaultCluster) -> None:
    topic = "crash"

    async def nemesis(wl: ProducerWorkload) -> None:
        await wait_ok(wl, 150, timeout=60, what="writes before the kill")
        old = await _move_leader_off(fc, topic, PROXIED)
        resets = _resets(fc)
        fc.kill_broker(old)
        # Bounded by half the lease: a lease expiry could not have done any of this.
        await wait_partition(
            fc.etcd.endpoint,
            topic,
            0,
            lambda s: s["leader"] not in (-1, old),
            timeout=LEASE_S / 2,
            what=f"a new leader within half the {LEASE_S} s lease",
        )
        await wait_ok(
            wl,
            50,
            timeout=LEASE_S / 2,
            what="acks=all writes acknowledged again within half the lease",
        )
        assert await _registration_epoch(fc, old) is None
        assert _resets(fc) == resets + 1
        await asyncio.to_thread(fc.restart_broker, old)

    async def run() -> None:
        await create_topic(fc, topic, configs=CONFIGS)
        report = await run_scenario(fc, topic, [0], nemesis, max_writes=4000)
        assert_no_loss(report, min_acknowledged=200)

    asyncio.run(run())


def test_a_paused_leader_is_left_to_its_lease(fc: FaultCluster) -> None:
    topic = "paused-crash"

    async def run() -> None:
        await create_topic(fc, topic, configs=CONFIGS)
        old = await _move_leader_off(fc, topic, PROXIED)
        epoch = await _registration_epoch(fc, old)
        assert epoch is not None
        resets = _resets(fc)
        fc.pause_broker(old)
        try:
            await wait_partition(
                fc.etcd.endpoint,
                topic,
                0,
                lambda s: s["leader"] not in (-1, old),
                timeout=3 * LEASE_S,
                what="the lease to expire and a new leader",
            )
            # The lease did it: no reset was inferred from the frozen process.
            assert _resets(fc) == resets
            assert await _registration_epoch(fc, old) is None
        finally:
            fc.resume_broker(old)

        async def back() -> bool:
            e = await _registration_epoch(fc, old)
            return e is not None and e != epoch

        await async_wait_for(back, timeout=3 * LEASE_S, what=f"broker {old} to register again")

    asyncio.run(run())


def test_a_live_broker_whose_controller_link_is_cut_keeps_its_place(
    fc: FaultCluster, hub: ProxyHub
) -> None:
    proxy = hub.links["controller->3"]
    epoch = asyncio.run(_registration_epoch(fc, PROXIED))
    assert epoch is not None
    resets = _resets(fc)
    accepted = proxy.accepted
    proxy.cut()  # every connection through it reset, new ones accepted and reset at once
    try:

        async def retried() -> bool:  # the controller reconnected (and probed) several times
            return proxy.accepted >= accepted + 6

        asyncio.run(async_wait_for(retried, timeout=60, what="the controller to retry broker 3"))
        assert asyncio.run(_registration_epoch(fc, PROXIED)) == epoch
        assert _resets(fc) == resets
    finally:
        proxy.heal()

    # Healed: broker 3, same epoch, gets and applies the controller's LeaderAndIsr again.
    async def led_by_3() -> None:
        topic = "after-cut"
        async with AsyncAdminClient(fc.live_bootstrap()) as admin:
            await admin.create_topic(topic, 1, 1)
            await admin.alter_partition_reassignments({(topic, 0): [PROXIED]})
        await wait_partition(
            fc.etcd.endpoint,
            topic,
            0,
            lambda s: s["leader"] == PROXIED,
            timeout=60,
            what="a partition led by broker 3",
        )

    asyncio.run(led_by_3())
    assert asyncio.run(_registration_epoch(fc, PROXIED)) == epoch
    assert _resets(fc) == resets
