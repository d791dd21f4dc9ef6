"""commitToGroup: each finished micro-batch's end offsets become the group's committed
offsets, so Headwater's group tools see a Spark job's lag (Spark's Kafka source cannot)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.client import AdminClient, TopicPartition
from headwater.dev.cluster import LocalCluster
from tests.helpers.spark import make_topic, produce


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
    query = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "laggy")
        .option("startingOffsets", "earliest")
        .option("commitToGroup", "spark-laggy")
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive
    with AdminClient(bootstrap) as admin:
        committed = admin.list_consumer_group_offsets("spark-laggy")
    assert committed == {TopicPartition("laggy", 0): 25, TopicPartition("laggy", 1): 25}
