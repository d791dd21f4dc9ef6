"""A topic whose ``max.message.bytes`` is below the producer's ``batch_size`` (4 MiB by
default) gets batches within its limit: the broker refuses a larger batch whole and this
producer does not split one (Kafka's KIP-126 does), so without the bound every record of a
full batch would fail with MESSAGE_TOO_LARGE."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater.client import AdminClient, Producer
from headwater.client.accumulator import Accumulator
from headwater.client.producer_batch import Group
from headwater.client.types import TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.errors import MessageTooLargeError
from tests.client.per_record_helpers import LoopThread, make_acc, read_all
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.timeout(300)

VALUE = b"x" * 1024
LIMIT = 256 * 1024


def test_a_limited_topic_gets_batches_within_its_limit_from_both_send_paths(
    cluster: LocalCluster,
) -> None:
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topic("limited", 1, configs={"max.message.bytes": str(LIMIT)})
    # linger long enough that the batches fill up to their bound before they are sent
    with Producer(cluster.bootstrap, acks=1, linger_ms=200) as p:
        futures = [p.send("limited", VALUE) for _ in range(2000)]
        group = p.send_many("limited", [VALUE] * 2000)
        p.flush(60)
        offsets = [f.result(60).offset for f in futures]
        ranges = group.result(60).ranges
    assert offsets == list(range(2000))
    assert sum(r.count for r in ranges) == 2000
    records = asyncio.run(read_all(cluster.bootstrap, "limited", 1, 4000))
    assert len(records) == 4000 and all(r.value == VALUE for r in records)


def _batches(acc: Accumulator, topic: str) -> list[Any]:
    with acc.lock:
        return [b for tp, dq in acc.queues.items() if tp.topic == topic for b in dq]


def test_limits_apply_per_topic_to_batches_opened_afterwards() -> None:
    lt = LoopThread()
    try:
        acc = make_acc(lt, batch_size=8192)
        tp_a, tp_b = TopicPartition("a", 0), TopicPartition("b", 0)

        def fill(tp: TopicPartition, n: int) -> None:
            for _ in range(n):
                acc.append(tp, b"v" * 100, None, None, 0, 112, None)

        lt.call(lambda: acc.limit_batches("a", 2048))
        lt.call(lambda: fill(tp_a, 60))
        lt.call(lambda: fill(tp_b, 60))
        a, b = _batches(acc, "a"), _batches(acc, "b")
        assert {x.limit for x in a} == {2048 * 15 // 16}
        assert all(x.nbytes <= x.limit for x in a) and len(a) >= 4
        assert {x.limit for x in b} == {8192} and len(b) == 1
        # a limit at or above batch_size, or none, leaves batch_size alone
        lt.call(lambda: acc.limit_batches("a", None))
        assert acc.room(TopicPartition("a", 1)) == 8192 - 128
        lt.call(lambda: acc.limit_batches("a", 10**9))
        assert acc.room(TopicPartition("a", 1)) == 8192 - 128
        lt.call(lambda: acc.limit_batches("a", 1024))
        assert acc.room(TopicPartition("a", 1)) == 1024 * 15 // 16 - 128
    finally:
        lt.stop()


def test_the_limit_comes_from_the_topic_configs_in_the_metadata(cluster: LocalCluster) -> None:
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topic("limited-md", 1, configs={"max.message.bytes": "65536"})
        admin.create_topic("unlimited-md", 1)
    with Producer(cluster.bootstrap, acks=1) as p:
        p.send("limited-md", VALUE).result(30)
        p.send("unlimited-md", VALUE).result(30)
        acc = p._p._acc
        assert acc is not None
        assert acc._topic_limits == {"limited-md": 65536 * 15 // 16}


def test_a_lowered_limit_is_learned_after_the_first_refused_batch(cluster: LocalCluster) -> None:
    # The producer learned 1 MiB; the topic is then limited to 128 KiB. The first batch
    # sized for the old limit is refused whole (no split); MESSAGE_TOO_LARGE makes the
    # producer refresh its metadata, and the batches after that keep within the new limit.
    topic = "lowered"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topic(topic, 1, configs={"max.message.bytes": str(1024 * 1024)})
        with Producer(cluster.bootstrap, acks=1, linger_ms=200) as p:
            p.send(topic, VALUE).result(30)
            acc = p._p._acc
            assert acc is not None
            assert acc._topic_limits[topic] == 1024 * 1024 * 15 // 16
            admin.alter_topic_configs(topic, {"max.message.bytes": str(128 * 1024)})
            refused = [p.send(topic, VALUE) for _ in range(900)]  # one ~0.9 MiB batch
            p.flush(60)
            assert all(isinstance(f.exception(60), MessageTooLargeError) for f in refused)
            metadata = p._p._metadata
            assert metadata is not None
            wait_for(
                lambda: metadata.view.topics[topic].configs.get("max.message.bytes")
                == str(128 * 1024),
                timeout=30,
                what="the producer's metadata to show the new limit",
            )
            later = [p.send(topic, VALUE) for _ in range(900)]
            p.flush(60)
            assert [f.result(60).offset for f in later] == list(range(1, 901))
            assert acc._topic_limits[topic] == 128 * 1024 * 15 // 16


def test_a_send_many_run_starts_its_own_batch_when_the_open_one_filled_meanwhile() -> None:
    # send_many sizes a run to the room it read; a send() from another thread may fill the
    # open batch before the run is appended: the run then goes to a new batch, never past
    # the limit.
    lt = LoopThread()
    try:
        acc = make_acc(lt, batch_size=4096)
        tp = TopicPartition("t", 0)

        def run() -> list[tuple[int, int]]:
            room = acc.room(tp)
            for _ in range(20):  # another caller fills the batch meanwhile
                acc.append(tp, b"v" * 100, None, None, 0, 112, None)
            group = Group("t", asyncio.get_running_loop().create_future())
            n = room // 112
            acc.append_many(tp, [b"v" * 100] * n, None, None, 0, n * 112, group)
            with acc.lock:
                return [(b.count, b.nbytes) for b in acc.queues[tp]]

        shape = lt.call(run)
        assert len(shape) >= 2
        assert all(nbytes <= 4096 for _, nbytes in shape)
    finally:
        lt.stop()
