"""Issue 6 acceptance: every service's /metrics of a real LocalCluster exports the required
families, and they move with what happens in the cluster.

One module-scoped cluster (etcd, 2 controllers, 3 brokers, 1 coordinator). Tests run in file
order and each leaves the cluster whole (killed brokers are restarted and awaited).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer
from headwater.client.types import TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.errors import UnknownTopicOrPartitionError
from headwater.v1 import controller_pb2, controller_pb2_grpc
from tests.helpers.wait import wait_for
from tests.metrics.families import (
    BROKER,
    BROKER_QUOTA,
    COMMON,
    CONTROLLER,
    COORDINATOR,
    Scrape,
    scrape,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def mcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("metrics")
    with LocalCluster(
        data_dir,
        brokers=3,
        controllers=2,
        coordinators=1,
        broker_args=["--session-timeout-s", "3"],
        coordinator_args=["--offsets-topic-partitions", "2", "--transaction-state-partitions", "1"],
        etcd_unsafe_no_fsync=True,
        startup_timeout=120,
    ) as c:
        yield c


def _scrapes(cluster: LocalCluster, kind: str) -> dict[int, Scrape]:
    procs = {"broker": cluster.brokers, "controller": cluster.controllers}.get(
        kind, cluster.coordinators
    )
    return {i: scrape(p.metrics_url) for i, p in procs.items() if p.alive()}


def _total(cluster: LocalCluster, kind: str, name: str, **labels: str) -> float:
    return sum(s.value(name, **labels) for s in _scrapes(cluster, kind).values())


def _admin(cluster: LocalCluster) -> AsyncAdminClient:
    return AsyncAdminClient(cluster.bootstrap_servers, request_timeout_ms=5_000)


async def _produce(cluster: LocalCluster, topic: str, n: int, size: int = 100) -> None:
    producer = AsyncProducer(cluster.bootstrap_servers, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, b"x" * size) for _ in range(n)]
        await producer.flush(30)
        await asyncio.gather(*futures)
    finally:
        await producer.close()


def test_every_service_exports_every_required_family(mcluster: LocalCluster) -> None:
    required = {"broker": BROKER, "controller": CONTROLLER, "coordinator": COORDINATOR}
    missing: list[str] = []
    for kind, families in required.items():
        scrapes = _scrapes(mcluster, kind)
        assert scrapes, f"no live {kind}"
        for i, s in scrapes.items():
            for name, type_ in {**COMMON, **families}.items():
                if s.types.get(name) != type_:
                    missing.append(f"{kind}-{i}: {name} ({type_}) got {s.types.get(name)}")
    assert not missing, "\n".join(missing)
    # One active controller among all controller processes.
    assert _total(mcluster, "controller", "headwater_controller_active") == 1
    # The RPC histogram has observations on brokers and controllers (health checks are not
    # counted, but they served Metadata / registration calls at start-up).
    for kind in ("broker", "controller"):
        assert _total(mcluster, kind, "headwater_rpc_duration_seconds_count") > 0, kind


def test_broker_exports_quota_throttle_time(mcluster: LocalCluster) -> None:
    for i, s in _scrapes(mcluster, "broker").items():
        for name, type_ in BROKER_QUOTA.items():
            assert s.types.get(name) == type_, f"broker-{i}: {name}"


def test_throughput_log_and_rpc_metrics_move(mcluster: LocalCluster) -> None:
    topic = "metrics-tput"

    async def run() -> int:
        admin = _admin(mcluster)
        try:
            await admin.create_topic(topic, partitions=2, replication_factor=3)
        finally:
            await admin.close()
        await _produce(mcluster, topic, 300)
        consumer = AsyncConsumer(mcluster.bootstrap_servers, auto_offset_reset="earliest")
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        got = 0
        try:
            deadline = asyncio.get_running_loop().time() + 60
            while got < 300 and asyncio.get_running_loop().time() < deadline:
                got += len(await consumer.poll(500))
        finally:
            await consumer.close()
        return got

    produce_before = _total(
        mcluster, "broker", "headwater_rpc_requests_total", service="broker", method="Produce"
    )
    assert asyncio.run(run()) == 300
    # in: counted on the leader (and again by followers appending their copies)
    assert _total(mcluster, "broker", "headwater_broker_records_in_total", topic=topic) >= 300
    assert _total(mcluster, "broker", "headwater_broker_bytes_in_total", topic=topic) >= 300 * 100
    assert _total(mcluster, "broker", "headwater_broker_records_out_total", topic=topic) >= 300
    assert _total(mcluster, "broker", "headwater_broker_bytes_out_total", topic=topic) >= 300 * 100
    assert (
        _total(
            mcluster, "broker", "headwater_rpc_requests_total", service="broker", method="Produce"
        )
        > produce_before
    )
    assert (
        _total(
            mcluster,
            "broker",
            "headwater_rpc_duration_seconds_count",
            service="broker",
            method="Produce",
        )
        > 0
    )
    wait_for(
        lambda: _total(mcluster, "broker", "headwater_broker_log_size_bytes", topic=topic)
        >= 3 * 300 * 100,  # three replicas of every byte
        timeout=30,
        what="log size of all replicas",
    )
    # every replica of both partitions has an active segment (gauge refreshed each second)
    wait_for(
        lambda: _total(mcluster, "broker", "headwater_broker_log_segments", topic=topic) >= 6,
        timeout=30,
        what="a segment gauge for every replica",
    )


def test_errors_are_counted_per_rpc_and_code(mcluster: LocalCluster) -> None:
    """A standby controller refuses CreateTopics with NOT_CONTROLLER (a gRPC status): the
    interceptor counts it by service, method and error code."""
    standby = next(
        (i, p)
        for i, p in mcluster.controllers.items()
        if scrape(p.metrics_url).value("headwater_controller_active") == 0
    )
    before = scrape(standby[1].metrics_url).value(
        "headwater_rpc_errors_total", method="CreateTopics", code="NOT_CONTROLLER"
    )
    with grpc.insecure_channel(standby[1].address) as ch, pytest.raises(grpc.RpcError):
        controller_pb2_grpc.ControllerStub(ch).CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[controller_pb2.NewTopic(name="x", partitions=1, replication_factor=1)]
            ),
            timeout=10,
        )
    after = scrape(standby[1].metrics_url)
    assert (
        after.value("headwater_rpc_errors_total", method="CreateTopics", code="NOT_CONTROLLER")
        == before + 1
    )
    assert after.value("headwater_rpc_requests_total", method="CreateTopics") >= 1


def test_group_lag_rises_while_stopped_and_falls_after_resume(mcluster: LocalCluster) -> None:
    topic, group = "metrics-lag", "metrics-group"

    async def consume_all_and_commit(expected: int) -> None:
        consumer = AsyncConsumer(
            mcluster.bootstrap_servers,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        consumer.subscribe([topic])
        got = 0
        try:
            deadline = asyncio.get_running_loop().time() + 60
            while got < expected and asyncio.get_running_loop().time() < deadline:
                got += len(await consumer.poll(500))
            assert got == expected
            await consumer.commit()
        finally:
            await consumer.close()

    async def setup() -> None:
        admin = _admin(mcluster)
        try:
            await admin.create_topic(topic, partitions=1, replication_factor=2)
        finally:
            await admin.close()
        await _produce(mcluster, topic, 20)
        await consume_all_and_commit(20)

    def lag() -> float:
        return _total(mcluster, "coordinator", "headwater_coordinator_group_lag", group=group)

    asyncio.run(setup())
    wait_for(
        lambda: "headwater_coordinator_group_lag" in _series(mcluster, group) and lag() == 0,
        timeout=60,
        what="the group's lag series at 0 after the first commit",
    )
    rebalances = _total(
        mcluster, "coordinator", "headwater_coordinator_rebalances_total", group=group
    )
    assert rebalances >= 1
    assert (
        _total(
            mcluster,
            "coordinator",
            "headwater_coordinator_rebalance_duration_seconds_count",
            group=group,
        )
        >= 1
    )
    # The consumer is stopped; the topic keeps growing: lag rises.
    asyncio.run(_produce(mcluster, topic, 50))
    wait_for(lambda: lag() == 50, timeout=60, what="lag 50 while the consumer is stopped")
    # It resumes, reads and commits: lag falls back to 0.
    asyncio.run(consume_all_and_commit(50))
    wait_for(lambda: lag() == 0, timeout=60, what="lag back to 0 after the consumer resumed")


def _series(cluster: LocalCluster, group: str) -> set[str]:
    names: set[str] = set()
    for s in _scrapes(cluster, "coordinator").values():
        for name, samples in s.samples.items():
            if any(lbls.get("group") == group for lbls, _ in samples):
                names.add(name)
    return names


def test_replication_health_and_elections_move_with_broker_faults(
    mcluster: LocalCluster,
) -> None:
    topic = "metrics-repl"

    async def create() -> tuple[int, tuple[int, ...]]:
        admin = _admin(mcluster)
        try:
            await admin.create_topic(
                topic, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"}
            )

            async def settled() -> tuple[int, tuple[int, ...]] | None:
                try:
                    (d,) = await admin.describe_topics([topic])
                except UnknownTopicOrPartitionError:  # metadata not propagated yet
                    return None
                p = d.partitions[0]
                return (p.leader, p.replicas) if p.leader >= 0 and len(p.isr) == 3 else None

            deadline = asyncio.get_running_loop().time() + 30
            while (found := await settled()) is None:
                assert asyncio.get_running_loop().time() < deadline, "ISR never complete"
                await asyncio.sleep(0.2)
            return found
        finally:
            await admin.close()

    def g(name: str) -> float:
        return _total(mcluster, "broker", name)

    leader, replicas = asyncio.run(create())
    asyncio.run(_produce(mcluster, topic, 10))
    wait_for(
        lambda: g("headwater_broker_under_replicated_partitions") == 0,
        timeout=30,
        what="no under-replicated partition before the fault",
    )
    shrinks, expands = (
        g("headwater_broker_isr_shrinks_total"),
        g("headwater_broker_isr_expands_total"),
    )

    # A follower dies: its partitions are under-replicated, at min ISR (2 of 3), ISR shrank.
    follower = next(r for r in replicas if r != leader)
    mcluster.kill_broker(follower)
    wait_for(
        lambda: g("headwater_broker_under_replicated_partitions") >= 1
        and g("headwater_broker_at_min_isr_partitions") >= 1,
        timeout=60,
        what="under-replicated and at-min-ISR gauges to rise after a follower was killed",
    )
    assert g("headwater_broker_isr_shrinks_total") > shrinks
    # It returns and catches up: the ISR expands, the gauges fall back.
    mcluster.restart_broker(follower)
    wait_for(
        lambda: g("headwater_broker_under_replicated_partitions") == 0
        and g("headwater_broker_at_min_isr_partitions") == 0,
        timeout=90,
        what="under-replicated and at-min-ISR gauges back to 0 after the follower returned",
    )
    assert g("headwater_broker_isr_expands_total") > expands

    # The leader dies: the active controller elects a new one (a clean election).
    elections = _total(mcluster, "controller", "headwater_controller_leader_elections_total")
    unclean = _total(mcluster, "controller", "headwater_controller_unclean_leader_elections_total")
    mcluster.kill_broker(leader)
    wait_for(
        lambda: _total(mcluster, "controller", "headwater_controller_leader_elections_total")
        > elections,
        timeout=60,
        what="the leader elections counter to rise after the leader was killed",
    )
    assert (
        _total(mcluster, "controller", "headwater_controller_unclean_leader_elections_total")
        == unclean
    )
    mcluster.restart_broker(leader)


def test_offline_partitions_rise_and_fall(mcluster: LocalCluster) -> None:
    topic = "metrics-offline"

    async def create() -> int:
        admin = _admin(mcluster)
        try:
            await admin.create_topic(topic, partitions=1, replication_factor=1)
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                with contextlib.suppress(UnknownTopicOrPartitionError):
                    (d,) = await admin.describe_topics([topic])
                    if d.partitions and d.partitions[0].leader >= 0:
                        return d.partitions[0].leader
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.2)
        finally:
            await admin.close()

    def offline() -> float:
        return _total(mcluster, "controller", "headwater_controller_offline_partitions")

    wait_for(lambda: offline() == 0, timeout=60, what="no offline partition at the start")
    owner = asyncio.run(create())
    mcluster.kill_broker(owner)
    wait_for(lambda: offline() >= 1, timeout=60, what="offline partitions > 0 after the kill")
    mcluster.restart_broker(owner)
    wait_for(lambda: offline() == 0, timeout=90, what="offline partitions back to 0")
