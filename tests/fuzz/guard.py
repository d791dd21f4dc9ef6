"""Acknowledged records that hostile traffic must not lose, and a produce/fetch round trip.

Before a hostile run, :func:`seed` creates :data:`TOPIC` (replicated to every broker, at most
3) and produces records with ``acks=all``, remembering the offset the broker acknowledged
for each. The name is longer than any text the hypothesis generator draws (at most 30
characters), is not in :data:`tests.fuzz.campaign.NAMES` and is never used by
:mod:`tests.fuzz.cases` (whose names start ``hw-absent``), so no hostile request can name
it. Afterwards :func:`lost` reads every partition back from its leader and reports any
acknowledged record missing or changed, and :func:`round_trip` produces fresh records and
fetches them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import grpc

from headwater.batch import decode_batches, encode_batch
from headwater.dev.cluster import LocalCluster
from headwater.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    controller_pb2,
    controller_pb2_grpc,
    metadata_pb2,
)
from headwater.v1.errors_pb2 import ErrorCode

TOPIC = "headwater-fuzz-guard-of-acknowledged-records"
PARTITIONS = 2
BATCHES = 10  # per partition
PER_BATCH = 20
_TIMEOUT = 60.0


@dataclass
class Guard:
    """Acknowledged values by partition and offset."""

    acked: dict[int, dict[int, bytes]] = field(default_factory=dict)


def leader_address(cluster: LocalCluster, topic: str, partition: int) -> str | None:
    """The address of ``topic``/``partition``'s leader as a live broker reports it."""
    for proc in cluster.brokers.values():
        if not (proc.alive() and proc.port):
            continue
        with grpc.insecure_channel(proc.address) as ch:
            try:
                resp = broker_pb2_grpc.BrokerStub(ch).Metadata(
                    metadata_pb2.MetadataRequest(topics=[topic]), timeout=10
                )
            except grpc.RpcError:
                continue
        addrs = {b.broker_id: f"{b.host}:{b.port}" for b in resp.brokers}
        for t in resp.topics:
            for p in t.partitions if t.name == topic else ():
                if p.partition == partition and p.leader in addrs:
                    return addrs[p.leader]
    return None


def produce_acked(
    cluster: LocalCluster, partition: int, values: list[bytes], topic: str = TOPIC
) -> int:
    """Produce ``values`` to its leader with acks=all, retrying failed answers for up to a
    minute; the acknowledged base offset (AssertionError with the last answer otherwise)."""
    deadline = time.monotonic() + _TIMEOUT
    last = "no leader known"
    while time.monotonic() < deadline:
        address = leader_address(cluster, topic, partition)
        if address is not None:
            with grpc.insecure_channel(address) as ch:
                try:
                    resp = broker_pb2_grpc.BrokerStub(ch).Produce(
                        broker_pb2.ProduceRequest(
                            acks=broker_pb2.ACKS_ALL,
                            timeout_ms=10_000,
                            partitions=[
                                broker_pb2.PartitionRecords(
                                    topic=topic, partition=partition, records=encode_batch(values)
                                )
                            ],
                        ),
                        timeout=30,
                    )
                    r = resp.partitions[0]
                    if r.error_code == ErrorCode.NONE:
                        return int(r.base_offset)
                    last = f"{ErrorCode.Name(r.error_code)} {r.error_message}"
                except grpc.RpcError as err:
                    last = f"{err.code().name} {err.details()}"
        time.sleep(0.2)
    raise AssertionError(f"produce to {topic}/{partition} failed for {_TIMEOUT:.0f}s: {last}")


def _fetch(cluster: LocalCluster, partition: int, until: int) -> dict[int, bytes]:
    """Every record of ``partition`` below offset ``until``, read from its leader."""
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + _TIMEOUT
    offset = 0
    last = ""
    while offset < until and time.monotonic() < deadline:
        address = leader_address(cluster, TOPIC, partition)
        if address is None:
            time.sleep(0.2)
            continue
        req = broker_pb2.FetchRequest(
            topic=TOPIC,
            partition=partition,
            offset=offset,
            max_wait_ms=100,
            max_bytes=1 << 20,
            replica_id=-1,
            current_leader_epoch=-1,  # a consumer that does not check epochs
        )
        with grpc.insecure_channel(address) as ch:
            try:
                resp = next(iter(broker_pb2_grpc.BrokerStub(ch).Fetch(req, timeout=30)))
            except (grpc.RpcError, StopIteration) as err:
                last = repr(err)
                time.sleep(0.2)
                continue
        if resp.error_code != ErrorCode.NONE:
            last = f"{ErrorCode.Name(resp.error_code)} {resp.error_message}"
            time.sleep(0.2)
            continue
        for batch in decode_batches(resp.records):
            for rec in batch.records():
                if rec.offset >= offset and rec.value is not None:
                    got[rec.offset] = rec.value
        offset = max(offset, resp.next_offset)
    if offset < until:
        raise AssertionError(f"fetch of {TOPIC}/{partition} stopped at {offset} < {until}: {last}")
    return got


def seed(cluster: LocalCluster) -> Guard:
    """Create the guard topic and produce acknowledged records to every partition."""
    rf = min(3, len(cluster.brokers))
    with grpc.insecure_channel(cluster.controller_addresses[0]) as ch:
        resp = controller_pb2_grpc.ControllerStub(ch).CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[
                    controller_pb2.NewTopic(
                        name=TOPIC, partitions=PARTITIONS, replication_factor=rf
                    )
                ]
            ),
            timeout=30,
        )
    assert resp.topics[0].error_code == ErrorCode.NONE, resp
    guard = Guard()
    for p in range(PARTITIONS):
        guard.acked[p] = {}
        for b in range(BATCHES):
            values = [f"guard-{p}-{b}-{i}".encode() for i in range(PER_BATCH)]
            base = produce_acked(cluster, p, values)
            guard.acked[p].update({base + i: v for i, v in enumerate(values)})
    return guard


def lost(cluster: LocalCluster, guard: Guard) -> list[str]:
    """Acknowledged records that are missing or changed (one line per partition)."""
    problems = []
    for p, acked in guard.acked.items():
        try:
            got = _fetch(cluster, p, max(acked) + 1)
        except AssertionError as exc:
            problems.append(str(exc))
            continue
        missing = [o for o, v in acked.items() if got.get(o) != v]
        if missing:
            problems.append(
                f"{TOPIC}/{p}: {len(missing)} of {len(acked)} acknowledged records missing or "
                f"changed (first at offset {min(missing)})"
            )
    return problems


def round_trip(cluster: LocalCluster) -> list[str]:
    """Produce fresh records (acks=all) to every guard partition and fetch them back."""
    problems = []
    for p in range(PARTITIONS):
        values = [f"fresh-{p}-{i}".encode() for i in range(PER_BATCH)]
        try:
            base = produce_acked(cluster, p, values)
            got = _fetch(cluster, p, base + len(values))
        except AssertionError as exc:
            problems.append(str(exc))
            continue
        if [got.get(base + i) for i in range(len(values))] != values:
            problems.append(f"{TOPIC}/{p}: fresh records not read back at {base}")
    return problems
