"""Helpers of the quota acceptance tests: setting quotas through the AdminClient, reading the
broker's quota metrics, a rate sampler, producing and consuming at full speed."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import urllib.request
from collections.abc import Mapping

import grpc

from headwater.batch.codec import encode_batch
from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer, ConfigResource
from headwater.client.types import TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.v1 import broker_pb2, broker_pb2_grpc
from tests.helpers.wait import wait_for

RATE = "headwater_broker_quota_rate"
LIMIT = "headwater_broker_quota_limit"
THROTTLE = "headwater_broker_quota_throttle_seconds_total"
#: one request's bytes over the minimum span may push the measured rate past the quota
TOLERANCE = 1.05
PROBE_TOPIC = "quota-probe"
VALUE_SIZE = 1000
#: producers and consumers keep requests small next to quota x window (docs/quotas.md)
BATCH_BYTES = 16 * 1024


def metric(url: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` with exactly the given labels, None when absent."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        m = re.match(r"^(\S+)\{(.*)\} (\S+)$", line)
        if m is None or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        if got == labels:
            return float(m.group(3))
    return None


class RateSampler:
    """Samples one quota group's measured rate every 50 ms in a thread; ``max`` afterwards."""

    def __init__(self, url: str, kind: str, user: str, client_id: str) -> None:
        self.url = url
        self.labels = {"type": kind, "user": user, "client_id": client_id}
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            value = metric(self.url, RATE, **self.labels)
            if value is not None:
                self.samples.append(value)

    def __enter__(self) -> RateSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    @property
    def max(self) -> float:
        assert self.samples, f"no samples of {self.labels}"
        return max(self.samples)


async def _alter(
    cluster: LocalCluster, resource: ConfigResource, values: Mapping[str, str], delete: list[str]
) -> None:
    admin = AsyncAdminClient(cluster.bootstrap_servers, request_timeout_ms=10_000)
    try:
        await admin.alter_configs(resource, values, delete)
    finally:
        await admin.close()


def set_quota(cluster: LocalCluster, resource: ConfigResource, **values: int) -> None:
    asyncio.run(_alter(cluster, resource, {k: str(v) for k, v in values.items()}, []))


def delete_quota(cluster: LocalCluster, resource: ConfigResource, *keys: str) -> None:
    asyncio.run(_alter(cluster, resource, {}, list(keys)))


def create_topic(cluster: LocalCluster, topic: str) -> None:
    async def run() -> None:
        admin = AsyncAdminClient(cluster.bootstrap_servers, request_timeout_ms=10_000)
        try:
            await admin.create_topic(topic, partitions=1, replication_factor=1)
        finally:
            await admin.close()

    asyncio.run(run())


def raw_produce(
    stub: broker_pb2_grpc.BrokerStub, topic: str, client_id: str, records: int = 1
) -> broker_pb2.ProduceResponse:
    """One Produce request of ``records`` values of VALUE_SIZE bytes, acks=leader."""
    batch = encode_batch([b"r" * VALUE_SIZE] * records)
    req = broker_pb2.ProduceRequest(
        acks=broker_pb2.ACKS_LEADER,
        timeout_ms=30_000,
        client_id=client_id,
        partitions=[broker_pb2.PartitionRecords(topic=topic, partition=0, records=batch)],
    )
    resp: broker_pb2.ProduceResponse = stub.Produce(req, timeout=60)
    assert resp.partitions[0].error_code == 0, resp
    return resp


def wait_applied(
    cluster: LocalCluster, client_id: str, group: tuple[str, str], bound: float
) -> None:
    """Probe with tiny produce requests until the broker reports ``bound`` as the produce
    quota of ``group`` (the watch delivered the change)."""
    url = cluster.brokers[1].metrics_url
    labels = {"type": "produce", "user": group[0], "client_id": group[1]}
    with grpc.insecure_channel(cluster.bootstrap) as ch:
        stub = broker_pb2_grpc.BrokerStub(ch)

        def applied() -> bool:
            stub.ProduceRecords(
                broker_pb2.ProduceRecordsRequest(
                    topic=PROBE_TOPIC,
                    partition=0,
                    acks=broker_pb2.ACKS_LEADER,
                    records=[broker_pb2.Record(value=b"p")],
                    client_id=client_id,
                ),
                timeout=60,
            )
            return metric(url, LIMIT, **labels) == bound

        wait_for(applied, timeout=20, what=f"produce quota {bound} of {group} applied")


def produce_for(cluster: LocalCluster, topic: str, client_ids: list[str], seconds: float) -> int:
    """Producers (one per client id) sending as fast as their buffers allow for ``seconds``;
    returns how many records were acknowledged (all of them, or this raises)."""

    async def one(client_id: str) -> int:
        p = AsyncProducer(
            cluster.bootstrap_servers,
            acks=1,
            client_id=client_id,
            batch_size=BATCH_BYTES,
            max_request_size=2 * BATCH_BYTES,
            buffer_memory=8 * BATCH_BYTES,
            linger_ms=1,
        )
        await p.start()
        futures = []
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                futures.append(await p.send(topic, b"v" * VALUE_SIZE))
            await p.flush(60)
            await asyncio.gather(*futures)
        finally:
            await p.close()
        return len(futures)

    async def run() -> int:
        return sum(await asyncio.gather(*(one(c) for c in client_ids)))

    return asyncio.run(run())


def consume_all(cluster: LocalCluster, topic: str, client_id: str, expected: int) -> int:
    """Read ``topic`` partition 0 from the start until ``expected`` records came (bounded)."""

    async def run() -> int:
        c = AsyncConsumer(
            cluster.bootstrap_servers,
            auto_offset_reset="earliest",
            client_id=client_id,
            max_partition_fetch_bytes=BATCH_BYTES,
        )
        c.assign([TopicPartition(topic, 0)])
        n = 0
        try:
            deadline = time.monotonic() + 120
            while n < expected and time.monotonic() < deadline:
                for fb in await c.poll_batches(timeout_ms=500):
                    n += len(fb.values())
        finally:
            await c.close()
        return n

    return asyncio.run(run())
