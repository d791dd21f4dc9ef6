"""commitToGroup: each finished micro-batch's end offsets become the group's committed
offsets, so Headwater's group tools see a Spark job's lag (Spark's Kafka source cannot)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.client import AdminClient, TopicPartition
from headwater.dev.cluster import LocalCluster
from tests.helpers.spark import make_topic, produce, stream_from_earliest


@pytest.fixture(scope="module")
def group_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir = tmp_path_factory.mktemp("spark-groups")
    with LocalCluster(
        data_dir, brokers=1, controllers=1, coordinators=1, etcd_unsafe_no_fsync=True
    ) as c:
        yield c


def test_micro_batch_end_offsets_are_committed_to_the_group(
    spark: Any, group_cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = group_cluster.bootstrap
    make_topic(bootstrap, "laggy", 2)
    produce(bootstrap, "laggy", [(i % 2, None, b"x%d" % i) for i in range(50)])
    _copy_available(spark, bootstrap, "laggy", tmp_path, commitToGroup="spark-laggy")
    with AdminClient(bootstrap) as admin:
        committed = admin.list_consumer_group_offsets("spark-laggy")
    assert committed == {TopicPartition("laggy", 0): 25, TopicPartition("laggy", 1): 25}


def _copy_available(spark: Any, bootstrap: str, topic: str, out: Path, **group: str) -> None:
    query = (
        stream_from_earliest(spark, bootstrap, topic, **group)
        .writeStream.format("parquet")
        .option("path", str(out / "out"))
        .option("checkpointLocation", str(out / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None


def test_kafka_group_id_is_the_group_offsets_are_committed_to(
    spark: Any, group_cluster: LocalCluster, tmp_path: Path
) -> None:
    """kafka.group.id (Spark's name for the source's group) is the group committed to."""
    bootstrap = group_cluster.bootstrap
    make_topic(bootstrap, "by-group-id", 2)
    produce(bootstrap, "by-group-id", [(i % 2, None, b"y%d" % i) for i in range(30)])
    _copy_available(spark, bootstrap, "by-group-id", tmp_path, **{"kafka.group.id": "job-7"})
    with AdminClient(bootstrap) as admin:
        committed = admin.list_consumer_group_offsets("job-7")
    assert committed == {TopicPartition("by-group-id", 0): 15, TopicPartition("by-group-id", 1): 15}


def test_group_id_prefix_names_a_group_per_query_run(
    spark: Any, group_cluster: LocalCluster, tmp_path: Path
) -> None:
    """groupIdPrefix: offsets go to "<prefix>-<uuid>", a new group per run, as Spark names
    its source's groups."""
    bootstrap = group_cluster.bootstrap
    make_topic(bootstrap, "by-prefix", 1)
    produce(bootstrap, "by-prefix", [(0, None, b"z%d" % i) for i in range(12)])
    with AdminClient(bootstrap) as admin:
        before = {g.group_id for g in admin.list_groups()}
    _copy_available(spark, bootstrap, "by-prefix", tmp_path, groupIdPrefix="etl-prefix")
    with AdminClient(bootstrap) as admin:
        new = [g.group_id for g in admin.list_groups() if g.group_id not in before]
        assert len(new) == 1 and new[0].startswith("etl-prefix-"), new
        committed = admin.list_consumer_group_offsets(new[0])
    assert committed == {TopicPartition("by-prefix", 0): 12}
