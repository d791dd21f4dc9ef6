"""The bad-input table (issue 7): one hostile input per row against a real cluster (etcd,
1 controller, 2 brokers, 1 coordinator), each answered with its typed error; after each row
nothing was appended (log end offsets unchanged), no topic appeared, and every process is
alive and SERVING. The brokers' memory stays bounded over the whole table (VmRSS).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from headwater.batch import encode_batch
from headwater.dev.cluster import LocalCluster
from headwater.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    controller_pb2,
    controller_pb2_grpc,
)
from headwater.v1 import coordinator_pb2 as cpb
from headwater.v1 import coordinator_pb2_grpc as cgrpc
from headwater.v1.errors_pb2 import ErrorCode as E
from tests.fuzz.hostile import GOOD, ClusterView, code_of_call, patched, rss_bytes, send_raw
from tests.helpers.internal import cluster_key, internal_channel, registration_epoch
from tests.helpers.wait import wait_for

T = "hostile"  # 2 partitions, replication factor 2, max.message.bytes 2048
I32_MAX = 2**31 - 1
SURVIVES = -1000  # transport-garbage rows: the expected outcome is that the server lives on
RSS_BOUND = 200 * 1024 * 1024
GROUP = "hostile-group"


class Env:
    """The cluster as the rows see it."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.view = ClusterView(cluster)
        self.member = ""
        self.generation = -1

    @property
    def controller(self) -> controller_pb2_grpc.ControllerStub:
        return controller_pb2_grpc.ControllerStub(
            self.view.channel(self.cluster.controller_addresses[0])
        )

    @property
    def coordinator(self) -> cgrpc.GroupCoordinatorStub:
        return cgrpc.GroupCoordinatorStub(self.view.channel(self.cluster.coordinator_addresses[0]))

    def leader(self, partition: int = 0, topic: str = T) -> Any:
        states = self.view.partitions(topic)
        leader = states[partition].leader if partition in states else self.view.leader(T, 0)
        return self.view.broker_stub(leader)

    def produce(self, records: bytes, topic: str = T, partition: int = 0) -> int:
        def call() -> int:
            r = self.leader(partition, topic).Produce(
                broker_pb2.ProduceRequest(
                    acks=broker_pb2.ACKS_ALL,
                    timeout_ms=10_000,
                    partitions=[
                        broker_pb2.PartitionRecords(
                            topic=topic, partition=partition, records=records
                        )
                    ],
                ),
                timeout=60,
            )
            return int(r.partitions[0].error_code)

        out: list[int] = []
        code = code_of_call(lambda: out.append(call()))
        return out[0] if out else code

    def create(self, *topics: controller_pb2.NewTopic) -> int:
        """The first non-NONE code of a CreateTopics (the whole-request code if it failed)."""
        out: list[Any] = []
        code = code_of_call(
            lambda: out.append(
                self.controller.CreateTopics(
                    controller_pb2.CreateTopicsRequest(topics=list(topics)), timeout=60
                )
            )
        )
        if not out:
            return code
        return next((t.error_code for t in out[0].topics if t.error_code), 0)

    def broker_epoch(self, broker_id: int) -> int:
        """From etcd (the registration's create revision): Metadata does not show it."""
        return registration_epoch(self.cluster.etcd.endpoint, broker_id)

    def internal_broker(self, broker_id: int) -> broker_pb2_grpc.BrokerStub:
        """Broker ``broker_id`` as the cluster's own services reach it (internal token)."""
        if not hasattr(self, "_internal"):
            self._internal: dict[int, grpc.Channel] = {}
        if broker_id not in self._internal:
            key = cluster_key(self.cluster.etcd.endpoint)
            address = self.cluster.brokers[broker_id].address
            self._internal[broker_id] = internal_channel(address, key)
        return broker_pb2_grpc.BrokerStub(self._internal[broker_id])

    def fetch_code(self, offset: int) -> int:
        req = broker_pb2.FetchRequest(topic=T, partition=0, offset=offset, max_bytes=1 << 20)
        return int(next(iter(self.leader().Fetch(req, timeout=30))).error_code)

    def commit(self, generation: int, member: str, partition: int = 0, offset: int = 0) -> int:
        resp = self.coordinator.OffsetCommit(
            cpb.OffsetCommitRequest(
                group_id=GROUP,
                generation_id=generation,
                member_id=member,
                partitions=[cpb.OffsetCommitPartition(topic=T, partition=partition, offset=offset)],
            ),
            timeout=30,
        )
        return int(resp.error_code or (resp.partitions[0].error_code if resp.partitions else 0))


def _nt(name: str = "hostile-new", partitions: int = 1, rf: int = 1, **configs: str) -> Any:
    return controller_pb2.NewTopic(
        name=name, partitions=partitions, replication_factor=rf, configs=configs
    )


def _flipped_crc() -> bytes:
    b = bytearray(GOOD)
    b[-3] ^= 0xFF
    return bytes(b)


Row = tuple[Callable[[Env], int], int]

ROWS: dict[str, Row] = {
    # --- produce: size, CRC and header fields, checked before anything is appended
    "over max.message.bytes": (
        lambda e: e.produce(encode_batch([b"x" * 4000])),
        E.MESSAGE_TOO_LARGE,
    ),
    "over the gRPC max message size": (
        lambda e: e.produce(b"\0" * (65 * 1024 * 1024)),
        E.MESSAGE_TOO_LARGE,
    ),
    "corrupt crc": (lambda e: e.produce(_flipped_crc()), E.CORRUPT_MESSAGE),
    "bad magic": (lambda e: e.produce(GOOD[:16] + b"XYZ" + GOOD[19:]), E.CORRUPT_MESSAGE),
    "bad version": (
        lambda e: e.produce(patched(GOOD, "<B", 19, 9, fix_crc=True)),
        E.CORRUPT_MESSAGE,
    ),
    "batch_length -1": (
        lambda e: e.produce(patched(GOOD, "<i", 8, -1, fix_crc=False)),
        E.CORRUPT_MESSAGE,
    ),
    "batch_length 2^31-1": (
        lambda e: e.produce(patched(GOOD, "<i", 8, I32_MAX, fix_crc=False)),
        E.CORRUPT_MESSAGE,
    ),
    "record_count 2^31-1": (
        lambda e: e.produce(patched(GOOD, "<i", 60, I32_MAX, fix_crc=True)),
        E.CORRUPT_MESSAGE,
    ),
    "record_count -1": (
        lambda e: e.produce(patched(GOOD, "<i", 60, -1, fix_crc=True)),
        E.CORRUPT_MESSAGE,
    ),
    "last_offset_delta 2^31-1": (
        lambda e: e.produce(patched(GOOD, "<i", 28, I32_MAX, fix_crc=True)),
        E.CORRUPT_MESSAGE,
    ),
    "unknown compression attribute": (
        lambda e: e.produce(patched(GOOD, "<h", 24, 0x47, fix_crc=True)),
        E.UNSUPPORTED_COMPRESSION_TYPE,
    ),
    "random bytes as records": (lambda e: e.produce(os.urandom(1024)), E.CORRUPT_MESSAGE),
    "unknown topic": (
        lambda e: e.produce(GOOD, topic="no-such-topic"),
        E.UNKNOWN_TOPIC_OR_PARTITION,
    ),
    "partition 2^31-1": (
        lambda e: e.produce(GOOD, partition=I32_MAX),
        E.UNKNOWN_TOPIC_OR_PARTITION,
    ),
    "negative partition": (lambda e: e.produce(GOOD, partition=-1), E.UNKNOWN_TOPIC_OR_PARTITION),
    # --- CreateTopics: counts and configs
    "2^31-1 partitions": (lambda e: e.create(_nt(partitions=I32_MAX)), E.INVALID_PARTITIONS),
    "2^31-1 partitions, validate only": (
        lambda e: e.controller.CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[_nt(partitions=I32_MAX)], validate_only=True
            ),
            timeout=30,
        )
        .topics[0]
        .error_code,
        E.INVALID_PARTITIONS,
    ),
    "negative partitions": (lambda e: e.create(_nt(partitions=-3)), E.INVALID_PARTITIONS),
    "replication factor above live brokers": (
        lambda e: e.create(_nt(rf=3)),
        E.INVALID_REPLICATION_FACTOR,
    ),
    "replication factor 2^31-1": (
        lambda e: e.create(_nt(rf=I32_MAX)),
        E.INVALID_REPLICATION_FACTOR,
    ),
    "negative max.message.bytes": (
        lambda e: e.create(_nt(**{"max.message.bytes": "-5"})),
        E.INVALID_CONFIG,
    ),
    "absurd retention.ms": (
        lambda e: e.create(_nt(**{"retention.ms": "9" * 400})),
        E.INVALID_CONFIG,
    ),
    "unknown config key": (lambda e: e.create(_nt(**{"no.such.key": "1"})), E.INVALID_CONFIG),
    "too many topics in one request": (
        lambda e: e.create(*[_nt(f"hostile-n{i}") for i in range(1001)]),
        E.INVALID_REQUEST,
    ),
    "too many partitions in one request": (
        lambda e: e.create(*[_nt(f"hostile-p{i}", partitions=4_000) for i in range(3)]),
        E.INVALID_PARTITIONS,
    ),
    # --- offsets out of range
    "fetch past the end": (lambda e: e.fetch_code(10**12), E.OFFSET_OUT_OF_RANGE),
    "fetch at a negative offset": (lambda e: e.fetch_code(-7), E.OFFSET_OUT_OF_RANGE),
    "list offsets of partition 2^31-1": (
        lambda e: e.leader()
        .ListOffsets(
            broker_pb2.ListOffsetsRequest(
                partitions=[
                    broker_pb2.ListOffsetsPartition(topic=T, partition=I32_MAX, timestamp=-1)
                ]
            ),
            timeout=30,
        )
        .partitions[0]
        .error_code,
        E.UNKNOWN_TOPIC_OR_PARTITION,
    ),
    "commit a negative offset": (
        lambda e: e.commit(e.generation, e.member, offset=-5),
        E.INVALID_REQUEST,
    ),
    "commit for partition -1": (
        lambda e: e.commit(e.generation, e.member, partition=-1),
        E.INVALID_REQUEST,
    ),
    # --- stale generations, members and epochs
    "stale generation (heartbeat)": (
        lambda e: e.coordinator.Heartbeat(
            cpb.HeartbeatRequest(
                group_id=GROUP, generation_id=e.generation - 1, member_id=e.member
            ),
            timeout=30,
        ).error_code,
        E.ILLEGAL_GENERATION,
    ),
    "stale generation (commit)": (
        lambda e: e.commit(e.generation - 1, e.member),
        E.ILLEGAL_GENERATION,
    ),
    "unknown member id": (
        lambda e: e.coordinator.Heartbeat(
            cpb.HeartbeatRequest(group_id=GROUP, generation_id=e.generation, member_id="nobody"),
            timeout=30,
        ).error_code,
        E.UNKNOWN_MEMBER_ID,
    ),
    "LeaderAndIsr from a plain client": (
        lambda e: code_of_call(
            lambda: e.view.broker_stub(1).LeaderAndIsr(
                broker_pb2.LeaderAndIsrRequest(controller_id=1, controller_epoch=I32_MAX),
                timeout=30,
            )
        ),
        E.CLUSTER_AUTHORIZATION_FAILED,
    ),
    "LeaderAndIsr with an old controller epoch": (
        lambda e: e.internal_broker(1)
        .LeaderAndIsr(
            broker_pb2.LeaderAndIsrRequest(
                controller_id=1, controller_epoch=0, broker_epoch=e.broker_epoch(1)
            ),
            timeout=30,
        )
        .error_code,
        E.STALE_CONTROLLER_EPOCH,
    ),
    "ReplicaFetch with a stale broker epoch": (
        lambda e: next(
            iter(
                e.internal_broker(1).ReplicaFetch(
                    iter(
                        [
                            broker_pb2.ReplicaFetchRequest(
                                replica_id=2, broker_epoch=1, max_wait_ms=10
                            )
                        ]
                    ),
                    timeout=30,
                )
            )
        ).error_code,
        E.STALE_BROKER_EPOCH,
    ),
    # --- transport garbage to a gRPC port: the server lives on
    "plaintext bytes": (lambda e: _raw(e, b"hello, is this kafka?\r\n" * 10), SURVIVES),
    "random bytes": (lambda e: _raw(e, os.urandom(64 * 1024)), SURVIVES),
    "an HTTP/1.1 request": (
        lambda e: _raw(
            e, b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n" + b"a" * 4096
        ),
        SURVIVES,
    ),
    "an HTTP/2 preface then garbage frames": (
        lambda e: _raw(e, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 9 + os.urandom(8192)),
        SURVIVES,
    ),
}


def _raw(env: Env, payload: bytes) -> int:
    for proc in [*env.cluster.brokers.values(), *env.cluster.controllers.values()]:
        send_raw(proc.address, payload)
    send_raw(env.cluster.coordinator_addresses[0], payload)
    return SURVIVES


def _join(env: Env) -> None:
    """A one-member group (so generations and member ids exist to be stale against)."""
    req = cpb.JoinGroupRequest(
        group_id=GROUP,
        session_timeout_ms=30_000,
        rebalance_timeout_ms=30_000,
        protocol_type="consumer",
        protocols=[cpb.JoinGroupProtocol(name="range", metadata=b"")],
    )
    answers: list[Any] = []

    def first_join() -> bool:
        # the coordinator serves before it has taken its partitions: NOT_COORDINATOR (or a load
        # in progress) is retriable, as for any client
        answers.append(env.coordinator.JoinGroup(req, timeout=60))
        retriable = (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS)
        return answers[-1].error_code not in retriable

    wait_for(first_join, timeout=30, what="the group's coordinator")
    first = answers[-1]
    assert first.error_code == E.MEMBER_ID_REQUIRED, first
    req.member_id = first.member_id
    joined = env.coordinator.JoinGroup(req, timeout=60)
    assert joined.error_code == E.NONE, joined
    env.member, env.generation = joined.member_id, joined.generation_id
    synced = env.coordinator.SyncGroup(
        cpb.SyncGroupRequest(
            group_id=GROUP,
            generation_id=env.generation,
            member_id=env.member,
            assignments=[cpb.SyncGroupAssignment(member_id=env.member, assignment=b"")],
        ),
        timeout=60,
    )
    assert synced.error_code == E.NONE, synced


def _led(env: Env, topic: str, partitions: int) -> bool:
    states = env.view.partitions(topic)
    return len(states) == partitions and all(s.leader >= 0 for s in states.values())


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with LocalCluster(
        tmp_path_factory.mktemp("hostile"),
        brokers=2,
        controllers=1,
        coordinators=1,
        etcd_unsafe_no_fsync=True,
    ) as cluster:
        e = Env(cluster)
        assert e.create(_nt(T, partitions=2, rf=2, **{"max.message.bytes": "2048"})) == E.NONE
        wait_for(lambda: _led(e, T, 2), timeout=30, what="leaders of the topic")
        wait_for(lambda: e.produce(GOOD) == E.NONE, timeout=30, what="the first produce")
        _join(e)
        e.rss_before = {b: rss_bytes(p.pid) for b, p in cluster.brokers.items()}  # type: ignore[attr-defined]
        try:
            yield e
        finally:
            e.view.close()


@pytest.mark.parametrize("row", list(ROWS))
def test_hostile_input(env: Env, row: str) -> None:
    run, expected = ROWS[row]
    topics = env.view.topics()
    ends = env.view.end_offsets(T)
    got = run(env)
    assert got == expected, f"{row}: got {E.Name(got) if got in E.values() else got}"
    assert env.view.end_offsets(T) == ends, f"{row}: something was appended"
    assert env.view.topics() == topics, f"{row}: a topic appeared or vanished"
    assert env.view.unhealthy() == [], row
    assert env.produce(GOOD) == E.NONE  # still serving writes


def test_slow_and_many_readers_keep_memory_bounded(env: Env) -> None:
    """300 streams of a ~24 MiB partition (1 MiB responses) on one connection, each read once
    and then left unread: the broker does not buffer without bound — a connection holds at most
    ``FetchMemory.per_connection`` bytes of read-but-unsent responses and the broker at most
    ``FetchMemory.total`` (services/broker/fetch_memory.py), so most of those streams wait for
    memory instead of growing the heap. Another connection is not starved meanwhile, and
    after the hostile client goes away everything it held is released."""
    big = encode_batch([os.urandom(1000) for _ in range(1000)])  # ~1 MiB
    created = env.create(
        _nt("hostile-big", partitions=1, rf=1, **{"max.message.bytes": str(2 << 20)})
    )
    assert created == E.NONE, E.Name(created)
    wait_for(lambda: _led(env, "hostile-big", 1), timeout=30, what="the big topic's leader")
    # Metadata can show the leader before the leader itself has applied its LeaderAndIsr
    # (UNKNOWN_TOPIC_OR_PARTITION for a moment): the first produce waits for it, bounded
    wait_for(
        lambda: env.produce(big, topic="hostile-big") == E.NONE, timeout=30, what="first produce"
    )
    for _ in range(23):
        assert env.produce(big, topic="hostile-big") == E.NONE
    leader_id = env.view.leader("hostile-big", 0)
    leader = env.cluster.brokers[leader_id]
    before = rss_bytes(leader.pid)
    req = broker_pb2.FetchRequest(topic="hostile-big", partition=0, offset=0, max_bytes=1 << 20)

    async def run() -> int:
        async with grpc.aio.insecure_channel(leader.address) as ch:
            stub = broker_pb2_grpc.BrokerStub(ch)
            streams = [stub.Fetch(req, timeout=120) for _ in range(300)]
            reads = [asyncio.ensure_future(s.read()) for s in streams]
            await asyncio.wait(reads, timeout=10)  # the first answers the budget allows
            answered = sum(1 for r in reads if r.done() and not r.exception())
            assert answered >= 5, f"only {answered} of 300 hostile streams were answered"
            grown = rss_bytes(leader.pid) - before
            async with grpc.aio.insecure_channel(leader.address, options=[("x", 1)]) as other:
                got = await asyncio.wait_for(
                    broker_pb2_grpc.BrokerStub(other).Fetch(req, timeout=30).read(), 30
                )  # a second connection has its own budget
                assert got.error_code == E.NONE and got.records
            for s in streams:
                s.cancel()
            for r in reads:
                r.cancel()
            await asyncio.gather(*reads, return_exceptions=True)
            return grown

    grown = asyncio.run(run())
    assert grown < RSS_BOUND, f"broker RSS grew by {grown >> 20} MiB with 300 stalled streams"
    assert env.view.unhealthy() == []
    assert env.produce(GOOD) == E.NONE


def test_memory_bounded_over_the_table(env: Env) -> None:
    for bid, before in env.rss_before.items():  # type: ignore[attr-defined]
        grown = rss_bytes(env.cluster.brokers[bid].pid) - before
        assert grown < RSS_BOUND, f"broker {bid} RSS grew by {grown >> 20} MiB"


def test_no_traceback_in_any_log(env: Env) -> None:
    from tests.fuzz.campaign import log_alarms

    assert log_alarms(env.cluster) == []
