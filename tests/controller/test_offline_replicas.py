"""Replicas a broker refuses to host (KAFKA_STORAGE_ERROR) are taken offline by the controller
(services/controller/offline_replicas.py): never leaders, out of the ISR; produce to them goes
through the new leader; a restart with room brings them back."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater import errors
from headwater.client import AdminClient, Producer
from headwater.dev.cluster import LocalCluster
from services.controller.offline_replicas import OfflineReplicas
from tests.helpers.wait import wait_for

#: broker 3's open-file limit: 64 kept for connections, 64 for index files, room for about
#: 120 partitions (one descriptor each)
LIMIT = 256
PARTITIONS = 150
TOPIC = "refused"


@pytest.mark.fast
def test_marks_follow_the_broker_registration_and_the_topic_id() -> None:
    off = OfflineReplicas()
    assert off.mark(3, 10, {("t", 0): "id1", ("t", 1): "id1"}) == [("t", 0), ("t", 1)]
    assert off.mark(3, 10, {("t", 0): "id1"}) == []  # already offline
    assert off.brokers(("t", 0), "id1") == {3}
    assert off.brokers(("t", 0), "id2") == set()  # the name deleted and created again
    assert off.clear(3, 9, [("t", 0)]) == []  # an answer of an earlier registration
    assert off.clear(3, 10, [("t", 0), ("t", 5)]) == [("t", 0)]
    assert off.brokers(("t", 0), "id1") == set() and len(off) == 1
    # a new registration epoch: the earlier marks no longer hold
    assert off.mark(3, 11, {("t", 2): "id1"}) == [("t", 2)]
    assert off.brokers(("t", 1), "id1") == set() and len(off) == 1
    off.forget(3)
    assert len(off) == 0 and not off.has(3)


def _limited(name: str) -> list[str]:
    return ["prlimit", f"--nofile={LIMIT}:{LIMIT}", "--"] if name == "broker-3" else []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("offline")
    with LocalCluster(data_dir, brokers=3, etcd_unsafe_no_fsync=True, launch_prefix=_limited) as c:
        yield c


def _hosted(c: LocalCluster, bid: int) -> set[int]:
    """Partitions of TOPIC whose log broker ``bid`` created."""
    home = c.data_dir / f"broker-{bid}" / "log-0"
    return {
        int(m.group(1)) for d in home.iterdir() if (m := re.fullmatch(rf"{TOPIC}-(\d+)", d.name))
    }


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_refused_replicas_lose_leadership_and_isr_and_produce_goes_to_the_new_leader(
    cluster: LocalCluster,
) -> None:
    with AdminClient(cluster.bootstrap_servers, request_timeout_ms=30_000) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3)
        refused_metric = "headwater_broker_partitions_refused_total"
        wait_for(
            lambda: _metric(cluster.brokers[3].metrics_url, refused_metric) > 0,
            timeout=60,
            what="broker 3 to refuse partitions past its open-file limit",
        )

        def settled() -> tuple[set[int], dict[int, tuple[int, tuple[int, ...], int]]] | None:
            # the logs broker 3 created (its refusal is counted before it creates the rest)
            refused = set(range(PARTITIONS)) - _hosted(cluster, 3)
            try:
                (d,) = admin.describe_topics([TOPIC])
            except errors.UnknownTopicOrPartitionError:
                return None  # not in this broker's metadata yet
            parts = {p.partition: (p.leader, tuple(p.isr), p.replicas[0]) for p in d.partitions}
            ok = all(
                leader in (1, 2) and 3 not in isr and {1, 2} <= set(isr)
                for p, (leader, isr, _) in parts.items()
                if p in refused
            ) and all(leader > 0 for leader, _, _ in parts.values())
            return (refused, parts) if ok else None

        refused, parts = wait_for(
            settled, timeout=90, what="metadata without broker 3 in its refused partitions"
        )
        assert refused and len(refused) < PARTITIONS, LIMIT
        # broker 3 was the preferred leader of some refused partitions: they moved
        assert any(parts[p][2] == 3 for p in refused)
        assert _metric(
            cluster.controllers[1].metrics_url, "headwater_controller_offline_replicas"
        ) == len(refused)

        with Producer(cluster.bootstrap_servers, acks="all") as producer:
            futures = {p: producer.send(TOPIC, b"v", partition=p) for p in sorted(refused)}
            producer.flush(60)
            for p, f in futures.items():
                md = f.result(30)
                assert md.partition == p and md.offset == 0
        assert all(parts[p][0] != 3 for p in refused)

    # broker 3 restarted without the limit: it hosts everything and rejoins every ISR
    proc = cluster.brokers[3]
    proc.argv = proc.argv[len(_limited("broker-3")) :]
    cluster.restart_broker(3)
    with AdminClient(cluster.bootstrap_servers, request_timeout_ms=30_000) as admin:

        def rejoined() -> bool:
            (d,) = admin.describe_topics([TOPIC])
            return all(3 in p.isr for p in d.partitions)

        wait_for(rejoined, timeout=120, what="broker 3 back in every ISR")
    assert _hosted(cluster, 3) == set(range(PARTITIONS))
    assert _metric(cluster.controllers[1].metrics_url, "headwater_controller_offline_replicas") == 0
