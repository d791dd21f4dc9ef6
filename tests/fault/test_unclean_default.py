"""The cluster-wide default of ``unclean.leader.election.enable`` decides elections (issue 15
item 7): topic override, then the dynamic cluster default, then the built-in default (false).

Real processes: etcd, one controller, two brokers whose replication links cross proxies. Two
RF=2 topics with two partitions each (so each broker leads one partition of each): ``open``
without an override and ``pinned`` with ``unclean.leader.election.enable=false``. The links
are cut until every ISR is its leader alone, then broker 1 is killed (SIGKILL): the partitions
it led have no live ISR member while broker 2, an out-of-sync replica, is alive. They go
offline. ``headwater configs alter --entity-type brokers --entity-default --add-config
unclean.leader.election.enable=true`` (the CLI, a subprocess) then gives ``open``'s offline
partition a leader (broker 2); ``pinned``'s stays offline (its override wins), and the
effective values DescribeConfigs reports agree with what the controller did.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fault.harness.cluster import FaultCluster, partition_state, wait_partition
from tests.fault.scenario import create_topic
from tests.helpers.cli import hw, ok

VICTIM, SURVIVOR = 1, 2
KEY = "unclean.leader.election.enable"


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultCluster]:
    data: Path = tmp_path_factory.mktemp("unclean-default")
    with FaultCluster(
        data,
        brokers=2,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        peer_proxies=True,
        broker_args=["--replica-lag-time-max-ms", "1500"],
    ) as c:
        yield c


def _cli(fc: FaultCluster, *args: str) -> str:
    return ok(hw(None, *args, env={"HEADWATER_BOOTSTRAP": fc.live_bootstrap()}))


def _effective(fc: FaultCluster, topic: str) -> tuple[str, str]:
    out = json.loads(
        _cli(
            fc,
            "--output",
            "json",
            "configs",
            "describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--all",
        )
    )
    entry = next(e for e in out["configs"] if e["name"] == KEY)
    return entry["value"], entry["source"]


def test_cluster_default_enables_unclean_election_unless_the_topic_overrides_it(
    fc: FaultCluster,
) -> None:
    async def setup() -> dict[str, int]:
        await create_topic(fc, "open", partitions=2, rf=2)
        await create_topic(fc, "pinned", partitions=2, rf=2, configs={KEY: "false"})
        fc.isolate_broker(VICTIM)  # no follower can fetch from either broker
        victim_led: dict[str, int] = {}
        for topic in ("open", "pinned"):
            for p in (0, 1):
                s = await wait_partition(
                    fc.etcd.endpoint,
                    topic,
                    p,
                    lambda s: s["isr"] == [s["leader"]],
                    timeout=30,
                    what=f"{topic}/{p}'s ISR to shrink to its leader",
                )
                if s["leader"] == VICTIM:
                    victim_led[topic] = p
        assert sorted(victim_led) == ["open", "pinned"], victim_led
        return victim_led

    victim_led = asyncio.run(setup())
    assert _effective(fc, "open") == ("false", "default")
    fc.kill_broker(VICTIM)
    fc.heal_links()

    async def offline() -> None:
        for topic, p in victim_led.items():
            await wait_partition(
                fc.etcd.endpoint,
                topic,
                p,
                lambda s: s["leader"] == -1 and s["isr"] == [VICTIM],
                timeout=40,
                what=f"{topic}/{p} offline (only an out-of-sync replica alive, unclean off)",
            )

    asyncio.run(offline())

    _cli(
        fc,
        "configs",
        "alter",
        "--entity-type",
        "brokers",
        "--entity-default",
        "--add-config",
        f"{KEY}=true",
    )
    assert _effective(fc, "open") == ("true", "dynamic_default")
    assert _effective(fc, "pinned") == ("false", "topic")

    async def elected() -> None:
        s = await wait_partition(
            fc.etcd.endpoint,
            "open",
            victim_led["open"],
            lambda s: s["leader"] == SURVIVOR,
            timeout=40,
            what="the out-of-sync survivor elected once the cluster default enables it",
        )
        assert s["isr"] == [SURVIVOR]
        # the same election pass decided the pinned topic: its override keeps it offline
        pinned = await partition_state(fc.etcd.endpoint, "pinned", victim_led["pinned"])
        assert pinned is not None and (pinned["leader"], pinned["isr"]) == (-1, [VICTIM])

    asyncio.run(elected())
