"""A follower that hangs (SIGSTOP) with its incremental fetch session open, on an idle
partition, with real processes: the leader takes it out of the ISR after
``replica.lag.time.max.ms`` and does not put it back on the stale session's word while it is
hung (Kafka adds a follower to the ISR only on a fetch showing it caught up); after SIGCONT
it rejoins."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from repl_helpers import create_topic, leads, paused, state_on, stub

from headwater.dev.cluster import LocalCluster
from headwater.v1 import metadata_pb2
from tests.helpers.wait import wait_for


@pytest.fixture(scope="module")
def c3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("idle-isr")
    with LocalCluster(
        data_dir,
        brokers=3,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--replica-lag-time-max-ms", "1500"],
    ) as c:
        yield c


def isr_on(c: LocalCluster, bid: int, topic: str) -> list[int]:
    s = state_on(c.brokers[bid].address, topic)
    return sorted(s.isr) if s is not None else []


def registered(c: LocalCluster, via: int) -> set[int]:
    """The brokers the metadata of broker ``via`` lists (registered, lease alive)."""
    ch, s = stub(c.brokers[via].address)
    with ch:
        resp = s.Metadata(metadata_pb2.MetadataRequest(topics=[]), timeout=5)
    return {b.broker_id for b in resp.brokers}


def isr_expands(c: LocalCluster, bid: int) -> float:
    text = urllib.request.urlopen(c.brokers[bid].metrics_url, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("headwater_broker_isr_expands_total "):
            return float(line.split()[1])
    return 0.0


def test_a_hung_follower_of_an_idle_partition_stays_out_of_the_isr(c3: LocalCluster) -> None:
    topic = "idle-hung"
    create_topic(c3, topic, min_insync_replicas="2")
    everyone = sorted(c3.brokers)
    leader = wait_for(
        lambda: next(
            (
                s.leader
                for b in everyone
                if (s := state_on(c3.brokers[b].address, topic)) is not None
                and s.leader in c3.brokers
                and leads(c3.brokers[s.leader].address, topic)
            ),
            None,
        ),
        timeout=40,
        what="a leader",
    )
    hung = next(b for b in everyone if b != leader)
    wait_for(lambda: isr_on(c3, leader, topic) == everyone, timeout=30, what="full ISR")
    expands = isr_expands(c3, leader)
    with paused(c3, hung):
        wait_for(
            lambda: isr_on(c3, leader, topic) == [b for b in everyone if b != hung],
            timeout=20,
            what="the hung follower out of the ISR",
        )
        # until the controller sees the hung broker's lease expire, its fetch stream stays
        # open: the leader's ISR passes (every 0.75 s) must not propose it again meanwhile
        wait_for(lambda: hung not in registered(c3, leader), timeout=40, what="the lease expired")
        assert isr_expands(c3, leader) == expands
        assert hung not in isr_on(c3, leader, topic)
    wait_for(lambda: isr_on(c3, leader, topic) == everyone, timeout=60, what="rejoined")
