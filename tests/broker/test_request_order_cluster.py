"""A broker process appends numbered produce requests in the client's order when the later
one reaches it first (``ProduceRequest.order_*``, services/broker/request_order.py), and a
non-idempotent producer with five requests in flight keeps every partition in send order."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from headwater.batch import encode_batch
from headwater.client import AdminClient, Producer
from headwater.dev.cluster import LocalCluster
from headwater.v1 import broker_pb2, broker_pb2_grpc
from tests.client.per_record_helpers import read_all
from tests.helpers.wait import async_wait_for
from tests.metrics.families import scrape

pytestmark = pytest.mark.timeout(300)

WAITS = "headwater_broker_produce_order_waits_total"


def _request(topic: str, value: bytes, number: int, after: int) -> broker_pb2.ProduceRequest:
    return broker_pb2.ProduceRequest(
        acks=broker_pb2.ACKS_LEADER,
        partitions=[broker_pb2.PartitionRecords(topic=topic, records=encode_batch([value]))],
        order_key=2**63 + 5,
        order_number=number,
        order_after=after,
    )


def test_a_later_request_that_arrives_first_is_appended_second(cluster: LocalCluster) -> None:
    topic = "order-e2e"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topic(topic, 1)
    metrics_url = cluster.brokers[1].metrics_url

    async def waits() -> float:
        return (await asyncio.to_thread(scrape, metrics_url)).value(WAITS)

    async def main() -> tuple[int, int]:
        async with grpc.aio.insecure_channel(cluster.bootstrap) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            before = await waits()
            second = asyncio.ensure_future(stub.Produce(_request(topic, b"second", 2, 1)))
            await async_wait_for(
                lambda: _true(before),
                timeout=30,
                what="the second request to wait at the broker",
                interval=0.005,
            )
            first = await stub.Produce(_request(topic, b"first", 1, 0))
            answer = await asyncio.wait_for(second, 30)
            assert first.partitions[0].error_code == answer.partitions[0].error_code == 0
            return first.partitions[0].base_offset, answer.partitions[0].base_offset

    async def _true(before: float) -> bool | None:
        return True if await waits() > before else None

    assert asyncio.run(main()) == (0, 1)
    records = asyncio.run(read_all(cluster.bootstrap, topic, 1, 2))
    assert [r.value for r in records] == [b"first", b"second"]


def test_a_non_idempotent_producer_keeps_send_order_with_five_in_flight(
    cluster: LocalCluster,
) -> None:
    # Batches above the broker's inline validation size (256 KiB: larger ones are checked in
    # a worker thread, where a later request can overtake), several threads: many requests
    # carry the same partition at once. Every thread's records come back in its send order on
    # each partition.
    topic = "order-e2e-producer"
    threads, per = 4, 6000
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topic(topic, 2)
    sent: dict[int, list[tuple[int, int]]] = {}
    pad = b"x" * 1000
    with Producer(
        cluster.bootstrap, acks=1, linger_ms=5, batch_size=300 * 1024, max_in_flight=5
    ) as p:

        def writer(t: int) -> None:
            futures = [p.send(topic, b"%d:%d:" % (t, i) + pad) for i in range(per)]
            p.flush(60)
            sent[t] = [(f.result(0).partition, f.result(0).offset) for f in futures]

        ws = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
        for w in ws:
            w.start()
        for w in ws:
            w.join(120)
        assert not any(w.is_alive() for w in ws)
    for t, metas in sent.items():
        for partition in (0, 1):
            offsets = [o for part, o in metas if part == partition]
            assert offsets == sorted(offsets), f"thread {t} partition {partition} reordered"
    records = asyncio.run(read_all(cluster.bootstrap, topic, 2, threads * per))
    by_thread: dict[tuple[int, int], list[int]] = {}
    for r in records:
        t, i = map(int, r.value.split(b":")[:2])
        by_thread.setdefault((t, r.partition), []).append(i)
    assert sum(map(len, by_thread.values())) == threads * per
    for key, seq in by_thread.items():
        assert seq == sorted(seq), f"thread/partition {key} read back out of order"
