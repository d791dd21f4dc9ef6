"""Config changes take effect on a running broker without restart (real cluster, real etcd):
retention shortened on a topic and as a cluster default (brokers/<default>) deletes old
segments; min.insync.replicas raised on a topic and for the broker (brokers/<id>) makes
acks=all writes fail with NOT_ENOUGH_REPLICAS; a topic override beats the broker default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater import errors
from headwater.client import AdminClient, ConfigResource, Producer, TopicPartition
from headwater.dev.cluster import LocalCluster
from tests.helpers.wait import wait_for

DEFAULT_BROKER = ConfigResource("broker", "<default>")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base: Path = tmp_path_factory.mktemp("dyncfg")
    with LocalCluster(
        base,
        brokers=1,
        controllers=1,
        etcd_unsafe_no_fsync=True,
        broker_args=["--log-retention-check-interval-ms", "200"],
    ) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[AdminClient]:
    a = AdminClient(cluster.bootstrap)
    yield a
    a.close()


def segments(c: LocalCluster, topic: str) -> list[Path]:
    return sorted(c.data_dir.rglob(f"{topic}-0/*.log"))


def earliest(admin: AdminClient, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: "earliest"})[tp].offset


def fill(c: LocalCluster, topic: str, records: int = 40) -> int:
    """Produce ``records`` records of 200 bytes (acks=all); returns the end offset."""
    with Producer(c.bootstrap, acks="all", linger_ms=0) as p:
        for i in range(records):
            p.send(topic, b"x" * 200, key=str(i).encode()).result(timeout=30)
    return records


def produce_error(c: LocalCluster, topic: str) -> BaseException | None:
    """One acks=all write without retries: its error (None when accepted)."""
    with Producer(c.bootstrap, acks="all", retries=0, enable_idempotence=False, linger_ms=0) as p:
        try:
            p.send(topic, b"v").result(timeout=30)
        except errors.HeadwaterError as exc:
            return exc
    return None


def is_not_enough_replicas(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, errors.NotEnoughReplicasError):
            return True
        exc = exc.__cause__
    return False


def test_topic_retention_shortened_deletes_old_segments(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    admin.create_topic("dc-ret", 1, 1, {"segment.bytes": "1024"})
    end = fill(cluster, "dc-ret")
    before = segments(cluster, "dc-ret")
    assert len(before) >= 4 and earliest(admin, "dc-ret") == 0
    admin.alter_configs(ConfigResource("topic", "dc-ret"), {"retention.ms": "1"})
    wait_for(
        lambda: len(segments(cluster, "dc-ret")) == 1,
        timeout=30,
        what="old segments deleted after retention.ms was shortened",
    )
    assert 0 < earliest(admin, "dc-ret") <= end
    (entry,) = [
        e
        for e in admin.describe_configs([ConfigResource("topic", "dc-ret")])[
            ConfigResource("topic", "dc-ret")
        ]
        if e.name == "retention.ms"
    ]
    assert (entry.value, entry.source) == ("1", "topic")


def test_cluster_default_retention_deletes_segments_but_topic_override_wins(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    admin.create_topic("dc-def", 1, 1, {"segment.bytes": "1024"})
    admin.create_topic("dc-keep", 1, 1, {"segment.bytes": "1024", "retention.ms": "-1"})
    fill(cluster, "dc-def")
    fill(cluster, "dc-keep")
    keep_before = segments(cluster, "dc-keep")
    assert len(segments(cluster, "dc-def")) >= 4 and len(keep_before) >= 4
    admin.alter_configs(DEFAULT_BROKER, {"retention.ms": "1"})
    try:
        wait_for(
            lambda: len(segments(cluster, "dc-def")) == 1,
            timeout=30,
            what="segments deleted after the cluster default retention.ms was shortened",
        )
        assert earliest(admin, "dc-def") > 0
        # the same retention passes kept the topic whose override says forever
        assert segments(cluster, "dc-keep") == keep_before and earliest(admin, "dc-keep") == 0
        got = admin.describe_configs([ConfigResource("topic", "dc-def")], include_defaults=True)
        (entry,) = [e for e in got[ConfigResource("topic", "dc-def")] if e.name == "retention.ms"]
        assert (entry.value, entry.source) == ("1", "dynamic_default")
    finally:
        admin.alter_configs(DEFAULT_BROKER, delete=["retention.ms"])


def test_min_insync_raised_on_topic_rejects_acks_all(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    admin.create_topic("dc-isr", 1, 1)
    wait_for(lambda: produce_error(cluster, "dc-isr") is None, timeout=30, what="topic writable")
    admin.alter_configs(ConfigResource("topic", "dc-isr"), {"min.insync.replicas": "2"})
    err = wait_for(
        lambda: (e := produce_error(cluster, "dc-isr")) is not None and e,
        timeout=30,
        what="acks=all rejected after min.insync.replicas=2",
    )
    assert is_not_enough_replicas(err), repr(err)
    admin.alter_configs(ConfigResource("topic", "dc-isr"), delete=["min.insync.replicas"])
    wait_for(
        lambda: produce_error(cluster, "dc-isr") is None,
        timeout=30,
        what="acks=all accepted again after the override was deleted",
    )


def test_min_insync_raised_for_one_broker_rejects_acks_all(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    admin.create_topic("dc-isr-b", 1, 1)
    wait_for(lambda: produce_error(cluster, "dc-isr-b") is None, timeout=30, what="writable")
    broker = ConfigResource("broker", "1")
    admin.alter_configs(broker, {"min.insync.replicas": "2"})
    try:
        err = wait_for(
            lambda: (e := produce_error(cluster, "dc-isr-b")) is not None and e,
            timeout=30,
            what="acks=all rejected after brokers/1 min.insync.replicas=2",
        )
        assert is_not_enough_replicas(err), repr(err)
        (entry,) = [
            e for e in admin.describe_configs([broker])[broker] if e.name == "min.insync.replicas"
        ]
        assert (entry.value, entry.source) == ("2", "dynamic_broker")
    finally:
        admin.alter_configs(broker, delete=["min.insync.replicas"])
    wait_for(
        lambda: produce_error(cluster, "dc-isr-b") is None,
        timeout=30,
        what="acks=all accepted again after the broker config was deleted",
    )
