"""Controller operations with real brokers that replicate: LocalCluster(brokers=3,
controllers=2), shared by the module (tests run in order and leave every broker running).

* a reassignment [1, 2] -> [2, 3] completes (broker 3 follows, catches up, joins the ISR
  through the leader's AlterPartition; broker 1 is stopped and deleted), records survive;
* broker kill -9: leaders move to ISR members with higher leader epochs; the restarted
  broker rejoins the ISRs; a preferred election gives it its leaderships back;
* controlled shutdown (SIGTERM): leadership moves *before* the broker's registration goes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater import errors
from headwater.client import AdminClient, Consumer, Producer, TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.platform import etcd as hetcd
from tests.helpers.wait import wait_for


@pytest.fixture(scope="module")
def c3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("c3")
    with LocalCluster(data_dir, brokers=3, controllers=2, etcd_unsafe_no_fsync=True) as c:
        yield c


@pytest.fixture(scope="module")
def admin(c3: LocalCluster) -> Iterator[AdminClient]:
    with AdminClient(c3.bootstrap_servers, request_timeout_ms=15_000) as a:
        yield a


def etcd_call(c: LocalCluster, fn: Any) -> Any:
    async def run() -> Any:
        client = await hetcd.Etcd.connect(c.etcd.endpoint)
        try:
            return await fn(client)
        finally:
            await client.close()

    return asyncio.run(run())


def states(c: LocalCluster, topic: str) -> dict[int, dict[str, Any]]:
    """Partition states from etcd, with the key's mod revision under ``"rev"``."""

    async def get(e: hetcd.Etcd) -> dict[int, dict[str, Any]]:
        snap = await e.get_prefix(f"/headwater/partitions/{topic}/")
        return {
            int(kv.key.rsplit("/", 1)[1]): {**json.loads(kv.value), "rev": kv.meta.mod_revision}
            for kv in snap.items
        }

    return dict(etcd_call(c, get))


def replicas(admin: AdminClient, topic: str) -> dict[int, Any]:
    """Partition descriptions from broker metadata ({} until the topic has reached it)."""
    try:
        (d,) = admin.describe_topics([topic])
    except errors.UnknownTopicOrPartitionError:
        return {}
    return {p.partition: p for p in d.partitions}


def produce(c: LocalCluster, topic: str, n: int) -> None:
    with Producer(c.bootstrap_servers, acks="all") as p:
        futures = [p.send(topic, f"r{i}".encode(), partition=0) for i in range(n)]
        p.flush(60)
        for f in futures:
            f.result(30)


def consume_values(c: LocalCluster, topic: str, n: int) -> list[bytes]:
    out: list[bytes] = []
    with Consumer(c.bootstrap_servers) as cons:
        tp = TopicPartition(topic, 0)
        cons.assign([tp])
        cons.seek_to_beginning(tp)
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            out += [r.value for r in cons.poll(500) if r.value is not None]
    return out


def reassigned(admin: AdminClient, topic: str, target: list[int]) -> bool:
    p = replicas(admin, topic).get(0)
    return (
        p is not None
        and list(p.replicas) == target
        and sorted(p.isr) == sorted(target)
        and p.leader in target
    )


def test_reassignment_1_2_to_2_3_completes_with_real_followers(
    c3: LocalCluster, admin: AdminClient
) -> None:
    admin.create_topic("moving", 1, 2)
    admin.alter_partition_reassignments({("moving", 0): [1, 2]})
    wait_for(lambda: reassigned(admin, "moving", [1, 2]), timeout=60, what="on [1, 2]")
    produce(c3, "moving", 200)
    admin.alter_partition_reassignments({("moving", 0): [2, 3]})
    wait_for(lambda: reassigned(admin, "moving", [2, 3]), timeout=60, what="moved to [2, 3]")
    assert admin.list_partition_reassignments() == []
    s = states(c3, "moving")[0]
    assert s["leader"] in (2, 3) and "adding_replicas" not in s
    assert consume_values(c3, "moving", 200) == [f"r{i}".encode() for i in range(200)]
    # broker 1 was told to delete its copy
    wait_for(
        lambda: not list((c3.data_dir / "broker-1").glob("log-*/moving-0")),
        timeout=30,
        what="broker 1 deleted moving-0",
    )


def test_broker_kill9_moves_leaders_to_isr_then_preferred_election(
    c3: LocalCluster, admin: AdminClient
) -> None:
    admin.create_topic("ha", 6, 3)
    wait_for(
        lambda: [len(p.isr) for p in replicas(admin, "ha").values()] == [3] * 6,
        timeout=30,
        what="full ISRs",
    )
    before = states(c3, "ha")
    led_by_1 = [p for p, s in before.items() if s["leader"] == 1]
    assert led_by_1
    killed = time.monotonic()
    c3.kill_broker(1)

    def moved() -> dict[int, dict[str, Any]] | None:
        now = states(c3, "ha")
        return now if all(now[p]["leader"] not in (1, -1) for p in led_by_1) else None

    after = wait_for(moved, timeout=30, what="leaders moved off the killed broker")
    elapsed = time.monotonic() - killed
    for p in led_by_1:
        assert after[p]["leader"] in before[p]["isr"]
        assert after[p]["leader_epoch"] > before[p]["leader_epoch"]
        assert 1 not in after[p]["isr"]
    # lease TTL (10 s) + election; generous for a loaded 2-core machine
    assert elapsed < 25, f"failover took {elapsed:.1f}s"

    c3.restart_broker(1)
    wait_for(
        lambda: all(1 in p.isr for p in replicas(admin, "ha").values()),
        timeout=60,
        what="broker 1 back in every ISR (AlterPartition expansions)",
    )
    results = admin.elect_leaders([("ha", p) for p in range(6)])
    assert {r.partition for r in results if r.error is None} >= set(led_by_1)
    now = replicas(admin, "ha")
    wait_for(
        lambda: all(p.leader == p.replicas[0] for p in replicas(admin, "ha").values()),
        timeout=10,
        what="preferred leaders",
    )
    assert all(p.leader_epoch > 0 for p in now.values() if p.replicas[0] == 1)


def test_controlled_shutdown_moves_leadership_before_the_broker_goes(
    c3: LocalCluster, admin: AdminClient
) -> None:
    admin.create_topic("cs", 6, 3)
    wait_for(
        lambda: [len(p.isr) for p in replicas(admin, "cs").values()] == [3] * 6,
        timeout=30,
        what="full ISRs",
    )
    before = states(c3, "cs")
    led_by_2 = [p for p, s in before.items() if s["leader"] == 2]
    assert led_by_2
    start_rev = max(s["rev"] for s in before.values())
    c3.stop_broker(2, timeout=30)

    async def deregistered_at(e: hetcd.Etcd) -> int:
        watch = await e.watch_prefix("/headwater/brokers/ids/2", start_revision=start_rev)
        try:
            async for ev in watch:
                if ev.kind == "delete":
                    return int(ev.mod_revision)
        finally:
            await watch.cancel()
        raise AssertionError("watch ended")

    gone_rev = etcd_call(c3, lambda e: asyncio.wait_for(deregistered_at(e), 20))
    after = states(c3, "cs")
    for p in led_by_2:
        assert after[p]["leader"] not in (2, -1)
        assert after[p]["leader_epoch"] == before[p]["leader_epoch"] + 1
    # the move was written while broker 2 was still registered (controlled, not lease loss)
    moves = [p for p in led_by_2 if after[p]["rev"] < gone_rev]
    assert moves == led_by_2, (gone_rev, after)
    c3.restart_broker(2)
