"""Helpers for replication tests against a real LocalCluster: raw gRPC produce/fetch/metadata
against one chosen broker (the client library would retry and hide the errors under test),
topic creation, and reading each broker's partition log files from its data directory."""

from __future__ import annotations

import asyncio
import os
import signal
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from headwater.batch import decode_batches, encode_batch, iter_headers
from headwater.client import AsyncAdminClient
from headwater.dev.cluster import LocalCluster, sync_channel
from headwater.errors import HeadwaterError
from headwater.v1 import broker_pb2, broker_pb2_grpc, metadata_pb2


def stub(address: str) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    ch = sync_channel(address)  # TLS under the suite's HEADWATER_TEST_TLS switch
    return ch, broker_pb2_grpc.BrokerStub(ch)


def create_topic(cluster: LocalCluster, name: str, rf: int = 3, **configs: str) -> None:
    async def run() -> None:
        async with AsyncAdminClient(cluster.bootstrap) as admin:
            await admin.create_topic(
                name, 1, rf, {k.replace("_", "."): v for k, v in configs.items()}
            )

    asyncio.run(run())


def state_on(address: str, topic: str) -> metadata_pb2.PartitionState | None:
    """Partition 0's state as the broker at ``address`` knows it (None: unknown/unreachable)."""
    ch, s = stub(address)
    with ch:
        try:
            resp = s.Metadata(metadata_pb2.MetadataRequest(topics=[topic]), timeout=2)
        except grpc.RpcError:
            return None
    for t in resp.topics:
        if t.name == topic and t.partitions:
            return t.partitions[0]
    return None


def leads(address: str, topic: str) -> bool:
    """True when the broker at ``address`` serves partition 0 as its leader (ListOffsets)."""
    ch, s = stub(address)
    with ch:
        try:
            resp = s.ListOffsets(
                broker_pb2.ListOffsetsRequest(
                    partitions=[
                        broker_pb2.ListOffsetsPartition(topic=topic, partition=0, timestamp=-1)
                    ]
                ),
                timeout=2,
            )
        except grpc.RpcError:
            return False
    return bool(resp.partitions) and resp.partitions[0].error_code == 0


def fetches_waiting(metrics_url: str, replica: int) -> float:
    """The leader's count of parked replica-fetch long polls from ``replica``."""
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    prefix = f'headwater_broker_replica_fetch_waiting{{replica="{replica}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return 0.0


def produce(  # type: ignore[no-untyped-def]
    address: str,
    topic: str,
    values: list[bytes],
    *,
    acks: int,
    timeout_ms: int = 5000,
    partition: int = 0,
):
    """One Produce of one batch to ``partition`` (default 0); the partition result."""
    ch, s = stub(address)
    with ch:
        resp = s.Produce(
            broker_pb2.ProduceRequest(
                acks=acks,
                timeout_ms=timeout_ms,
                partitions=[
                    broker_pb2.PartitionRecords(
                        topic=topic, partition=partition, records=encode_batch(values)
                    )
                ],
            ),
            timeout=timeout_ms / 1000 + 10,
        )
    return resp.partitions[0]


def fetch_once(
    address: str, topic: str, offset: int, partition: int = 0
) -> broker_pb2.FetchResponse:
    """The first answer of a Fetch stream from ``offset`` (short long-poll)."""
    ch, s = stub(address)
    with ch:
        stream = s.Fetch(
            broker_pb2.FetchRequest(
                topic=topic,
                partition=partition,
                offset=offset,
                max_wait_ms=100,
                max_bytes=8 << 20,
                replica_id=-1,
                current_leader_epoch=-1,
            ),
            timeout=10,
        )
        try:
            return next(iter(stream))
        finally:
            stream.cancel()


def fetched_values(address: str, topic: str, partition: int = 0) -> tuple[list[bytes], int]:
    """Every value a consumer can read from the leader at ``address`` and the HW."""
    values: list[bytes] = []
    offset, hw = 0, -1
    while True:
        r = fetch_once(address, topic, offset, partition)
        if r.error_code:
            raise AssertionError(f"fetch failed: {r.error_code} {r.error_message}")
        hw = r.high_watermark
        for b in decode_batches(r.records):
            values.extend(v for v in b.values() if v is not None)
        if r.next_offset == offset:
            return values, hw
        offset = r.next_offset


@dataclass(frozen=True)
class StoredBatch:
    base_offset: int
    next_offset: int
    leader_epoch: int
    crc: int
    raw: bytes


def log_batches(cluster: LocalCluster, broker_id: int, topic: str) -> list[StoredBatch]:
    """The batches in a broker's on-disk log of ``topic``-0 (whole batches only)."""
    out: list[StoredBatch] = []
    for d in sorted((cluster.data_dir / f"broker-{broker_id}").glob(f"log-*/{topic}-0")):
        for seg in sorted(Path(d).glob("*.log")):
            data = seg.read_bytes()
            try:
                for pos, h in iter_headers(data):
                    out.append(
                        StoredBatch(
                            h.base_offset,
                            h.next_offset,
                            h.partition_leader_epoch,
                            h.crc,
                            data[pos : pos + h.total_size],
                        )
                    )
            except HeadwaterError:
                pass  # a batch being written right now: the prefix before it counts
    return out


def upto(batches: list[StoredBatch], end: int) -> list[StoredBatch]:
    return [b for b in batches if b.next_offset <= end]


@contextmanager
def paused(cluster: LocalCluster, *broker_ids: int) -> Iterator[None]:
    """SIGSTOP the brokers for the block; SIGCONT them whatever happens."""
    pids = [cluster.brokers[b].pid for b in broker_ids]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]
