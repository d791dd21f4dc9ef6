"""Request limits against real service processes (issue 15, items 1 and 2): a cluster of etcd,
1 controller, 1 broker and 1 coordinator, each process under an address-space cap.

* The issue's reproductions (a 1 M-entry OffsetFetch, the same AddPartitionsToTxn for an
  unknown transactional id, a 4 MB broker ListOffsets, a 20 MB AlterPartitionReassignments,
  ...) are answered with INVALID_ARGUMENT and the typed INVALID_REQUEST trailer (or, above a
  server's receive limit, gRPC's RESOURCE_EXHAUSTED), with a short message naming the field
  and the limit; every process stays alive, SERVING, and within a bounded RSS growth.
* Undecodable bytes on every method of every service — enumerated from the descriptors, so a
  new RPC is covered without editing this file — are answered INVALID_ARGUMENT /
  INVALID_REQUEST, never UNKNOWN.
* The worst requests the limits allow, sent for longer than the coordinator's 5 s etcd lease,
  do not cost it its lease: it stays registered and serving.
"""

from __future__ import annotations

import re
import resource
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from headwater.client.grpc_options import channel_options
from headwater.dev.cluster import LocalCluster
from headwater.errors import ERROR_CODE_METADATA_KEY
from headwater.platform import limits as L
from headwater.v1 import (
    broker_pb2,
    controller_pb2,
    coordinator_pb2,
    metadata_pb2,
    transaction_pb2,
)
from headwater.v1.errors_pb2 import ErrorCode as E
from tests.fuzz import rpcs
from tests.fuzz.hostile import rss_bytes
from tests.helpers.internal import cluster_key, internal_channel
from tests.helpers.wait import wait_for

#: Address space each service process may add after start-up (RLIMIT_AS, set with prlimit):
#: a request that escaped its limits would fail allocating instead of swapping the machine.
AS_HEADROOM = 1536 * 1024 * 1024
#: RSS growth allowed over the whole module per process. A broker control request may be up to
#: 64 MiB (limits ``control``): the 10^6-entry OffsetForLeaderEpoch / WriteTxnMarkers rows decode
#: to ~150-200 MiB of message objects before their entries are counted and refused, and glibc
#: keeps part of that heap afterwards (measured growth 203-215 MiB on an idle 2-core machine).
#: What must not happen is growth that follows the number or size of requests beyond that.
RSS_BOUND = 320 * 1024 * 1024
D = L.DEFAULT_LIMITS.default


@dataclass
class Answer:
    status: grpc.StatusCode
    code: int  # the headwater-error-code trailer, -1 without one
    details: str


class Env:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.channels: dict[str, grpc.Channel] = {}
        self.key: bytes | None = None
        self.procs = {
            "controller": next(iter(cluster.controllers.values())),
            "broker": next(iter(cluster.brokers.values())),
            "coordinator": next(iter(cluster.coordinators.values())),
        }
        self.rss_before = {k: rss_bytes(p.pid) for k, p in self.procs.items()}

    def address(self, kind: str) -> str:
        return str(self.procs[kind].address)

    def channel(self, address: str, *, internal: bool = False) -> grpc.Channel:
        """A plain client's channel, or (``internal``) one speaking as the cluster itself, which
        gets past the internal-identity check: a plain client is refused before a client
        stream's first message is read (test_control_plane.py)."""
        name = f"{address} internal" if internal else address
        if name not in self.channels:
            opts = channel_options(256 * 1024 * 1024)
            if not internal:
                self.channels[name] = grpc.insecure_channel(address, options=opts)
            else:
                if self.key is None:
                    self.key = cluster_key(self.cluster.etcd.endpoint)
                self.channels[name] = internal_channel(address, self.key, options=opts)
        return self.channels[name]

    def call(
        self, kind: str, method: str, payload: bytes, timeout: float = 60, internal: bool = False
    ) -> Answer:
        """Send raw ``payload`` to ``method`` (``/pkg.Service/Method``) of the ``kind``
        process (as the cluster itself when ``internal``); the answer's status, trailer code
        and details (OK: code 0)."""
        ch = self.channel(self.address(kind), internal=internal)
        try:
            if method in STREAMING_REQUESTS or method in STREAMING_RESPONSES:
                if method in STREAMING_REQUESTS:
                    stream = ch.stream_stream(method, None, None)(iter([payload]), timeout=timeout)
                else:
                    stream = ch.unary_stream(method, None, None)(payload, timeout=timeout)
                for _ in stream:
                    stream.cancel()
                    break
            else:
                ch.unary_unary(method, None, None)(payload, timeout=timeout)
        except grpc.RpcError as err:
            trailer = dict(err.trailing_metadata() or ()).get(ERROR_CODE_METADATA_KEY)
            return Answer(err.code(), int(trailer) if trailer else -1, err.details() or "")
        return Answer(grpc.StatusCode.OK, 0, "")

    def healthy(self) -> list[str]:
        return [k for k, p in self.procs.items() if not (p.alive() and rpcs.healthy(p.address))]

    def close(self) -> None:
        for ch in self.channels.values():
            ch.close()


def _methods() -> list[tuple[str, str, Any]]:
    out = []
    for _name, (svc, kinds) in rpcs.SERVICES.items():
        for m in svc.methods:
            out.append((kinds[0], f"/{svc.full_name}/{m.name}", m))
    return out


METHODS = _methods()
STREAMING_REQUESTS = {path for _k, path, m in METHODS if m.client_streaming}
STREAMING_RESPONSES = {path for _k, path, m in METHODS if m.server_streaming}


def _cap(pid: int) -> None:
    """Cap the address space of ``pid`` at its current size plus :data:`AS_HEADROOM`."""
    from pathlib import Path

    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            size = int(line.split()[1]) * 1024
            resource.prlimit(pid, resource.RLIMIT_AS, (size + AS_HEADROOM, size + AS_HEADROOM))
            return
    raise RuntimeError(f"no VmSize for {pid}")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with LocalCluster(
        tmp_path_factory.mktemp("limits"),
        brokers=1,
        controllers=1,
        coordinators=1,
        etcd_unsafe_no_fsync=True,
    ) as cluster:
        e = Env(cluster)
        for p in e.procs.values():
            _cap(p.pid)
        created = controller_pb2.CreateTopicsRequest(
            topics=[controller_pb2.NewTopic(name="limits", partitions=1, replication_factor=1)]
        )
        ch = e.channel(e.address("controller"))
        resp = ch.unary_unary(
            "/headwater.v1.Controller/CreateTopics",
            controller_pb2.CreateTopicsRequest.SerializeToString,
            controller_pb2.CreateTopicsResponse.FromString,
        )(created, timeout=30)
        assert resp.topics[0].error_code == E.NONE, resp
        try:
            yield e
        finally:
            e.close()


def _offset_fetch(partitions: int) -> bytes:
    tp = coordinator_pb2.TopicPartitions(topic="limits", partitions=range(partitions))
    return coordinator_pb2.OffsetFetchRequest(group_id="g", partitions=[tp]).SerializeToString()


def _add_partitions(partitions: int) -> bytes:
    tp = transaction_pb2.TxnTopicPartitions(topic="limits", partitions=range(partitions))
    return transaction_pb2.AddPartitionsToTxnRequest(
        transactional_id="no-such-txn", producer_id=1, producer_epoch=0, partitions=[tp]
    ).SerializeToString()


def _list_offsets(partitions: int) -> bytes:
    return broker_pb2.ListOffsetsRequest(
        partitions=[
            broker_pb2.ListOffsetsPartition(topic="limits", partition=i, timestamp=-1)
            for i in range(partitions)
        ]
    ).SerializeToString()


def _reassign(entries: int, replicas: int) -> bytes:
    return controller_pb2.AlterPartitionReassignmentsRequest(
        partitions=[
            controller_pb2.ReassignmentTarget(topic="limits", partition=i, replicas=range(replicas))
            for i in range(entries)
        ]
    ).SerializeToString()


INVALID = (grpc.StatusCode.INVALID_ARGUMENT, E.INVALID_REQUEST)
TOO_BIG = (grpc.StatusCode.RESOURCE_EXHAUSTED, -1)  # above the server's receive limit

#: name -> (process kind, method, payload builder, expected (status, trailer), words in details)
ROWS: dict[str, tuple[str, str, Any, tuple[grpc.StatusCode, int], str]] = {
    "OffsetFetch, 1 M packed partitions (~3 MB)": (
        "coordinator",
        "/headwater.v1.GroupCoordinator/OffsetFetch",
        lambda: _offset_fetch(1_000_000),
        INVALID,
        f"partitions[0].partitions has 1000000 entries; the limit is {D.max_entries}",
    ),
    "OffsetFetch, 3 M packed partitions (~10 MB)": (
        "coordinator",
        "/headwater.v1.GroupCoordinator/OffsetFetch",
        lambda: _offset_fetch(3_000_000),
        TOO_BIG,
        "",
    ),
    "AddPartitionsToTxn, unknown transactional id, 1 M partitions": (
        "coordinator",
        "/headwater.v1.TransactionCoordinator/AddPartitionsToTxn",
        lambda: _add_partitions(1_000_000),
        INVALID,
        "AddPartitionsToTxnRequest.partitions[0].partitions has 1000000 entries",
    ),
    "broker ListOffsets, 4 MB (160 000 partitions)": (
        "broker",
        "/headwater.v1.Broker/ListOffsets",
        lambda: _list_offsets(160_000),
        INVALID,
        f"ListOffsetsRequest.partitions has 160000 entries; the limit is {D.max_entries}",
    ),
    "broker ListOffsets, 6 MB": (
        "broker",
        "/headwater.v1.Broker/ListOffsets",
        lambda: _list_offsets(240_000),
        INVALID,
        f"the limit is {D.max_request_bytes}",
    ),
    "AlterPartitionReassignments, 20 MB": (
        "controller",
        "/headwater.v1.Controller/AlterPartitionReassignments",
        lambda: _reassign(10, 700_000),
        TOO_BIG,
        "",
    ),
    "AlterPartitionReassignments, 1 000 000 replicas in one target (~3 MB)": (
        "controller",
        "/headwater.v1.Controller/AlterPartitionReassignments",
        lambda: _reassign(1, 1_000_000),
        INVALID,
        "partitions[0].replicas has 1000000 entries",
    ),
    # found by the hostile-input suite (/work/notes/fuzz-findings.md, run 1)
    "Produce, 10^6 lean partitions (~10 MB)": (
        "broker",
        "/headwater.v1.Broker/Produce",
        lambda: broker_pb2.ProduceRequest(
            acks=broker_pb2.ACKS_ALL,
            partitions=[
                broker_pb2.PartitionRecords(topic="limits", partition=2**21 + i)
                for i in range(1_000_000)
            ],
        ).SerializeToString(),
        INVALID,
        "ProduceRequest.partitions has more than 100000 entries",
    ),
    "OffsetForLeaderEpoch, 10^6 partitions": (
        "broker",
        "/headwater.v1.Broker/OffsetForLeaderEpoch",
        lambda: broker_pb2.OffsetForLeaderEpochRequest(
            partitions=[
                broker_pb2.OffsetForLeaderEpochPartition(topic="limits", partition=i)
                for i in range(1_000_000)
            ]
        ).SerializeToString(),
        INVALID,
        "OffsetForLeaderEpochRequest.partitions has 1000000 entries; the limit is 200000",
    ),
    "WriteTxnMarkers, 10^6 marker partitions": (
        "broker",
        "/headwater.v1.Broker/WriteTxnMarkers",
        lambda: broker_pb2.WriteTxnMarkersRequest(
            markers=[
                broker_pb2.WriteTxnMarker(
                    producer_id=1,
                    partitions=[
                        broker_pb2.TxnMarkerPartition(topic="limits", partition=i)
                        for i in range(1_000_000)
                    ],
                )
            ]
        ).SerializeToString(),
        INVALID,
        "markers[0].partitions has 1000000 entries",
    ),
    "AlterConfigs, 10^6 empty resources (2 MB)": (
        "controller",
        "/headwater.v1.Controller/AlterConfigs",
        lambda: controller_pb2.AlterConfigsRequest(
            resources=[controller_pb2.AlterConfigsResource() for _ in range(1_000_000)]
        ).SerializeToString(),
        INVALID,
        "AlterConfigsRequest.resources has 1000000 entries",
    ),
    "LeaveGroup, 10^6 members (~30 MB)": (
        "coordinator",
        "/headwater.v1.GroupCoordinator/LeaveGroup",
        lambda: coordinator_pb2.LeaveGroupRequest(
            group_id="g",
            members=[
                coordinator_pb2.MemberIdentity(member_id=f"member-{i:020d}")
                for i in range(1_000_000)
            ],
        ).SerializeToString(),
        TOO_BIG,
        "",
    ),
    "Metadata, a 100 000-character topic name": (
        "broker",
        "/headwater.v1.Broker/Metadata",
        lambda: metadata_pb2.MetadataRequest(topics=["t" * 100_000]).SerializeToString(),
        INVALID,
        "MetadataRequest.topics[0] is 100000 characters long; the limit is 249",
    ),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_issue_reproductions_get_typed_answers(env: Env, row: str) -> None:
    kind, method, build, (status, code), words = ROWS[row]
    got = env.call(kind, method, build())
    assert (got.status, got.code) == (status, code), f"{row}: {got}"
    assert words in got.details, f"{row}: {got.details!r}"
    assert len(got.details) < 400, f"{row}: a {len(got.details)}-character message"
    assert env.healthy() == [], row


def test_undecodable_bytes_on_every_method(env: Env) -> None:
    """A field 1 of 5 bytes with 2 present: no message type decodes it (nor does the broker's
    hand-written Produce parser). Sent as the cluster itself, so that internal client-stream
    RPCs (ReplicaFetch) read the message instead of refusing the caller first."""
    garbage = b"\x0a\x05ab"
    wrong = []
    for kind, path, _m in METHODS:
        got = env.call(kind, path, garbage, timeout=30, internal=True)
        if (got.status, got.code) != INVALID or path.rsplit("/", 1)[-1] not in got.details:
            wrong.append(f"{path}: {got}")
    assert wrong == []
    assert env.healthy() == []


def test_truncated_valid_requests_are_invalid(env: Env) -> None:
    full = _offset_fetch(1000)
    got = env.call("coordinator", "/headwater.v1.GroupCoordinator/OffsetFetch", full[:-7])
    assert (got.status, got.code) == INVALID, got
    produce = broker_pb2.ProduceRequest(
        acks=broker_pb2.ACKS_ALL,
        partitions=[broker_pb2.PartitionRecords(topic="limits", records=b"r" * 100)],
    ).SerializeToString()
    got = env.call("broker", "/headwater.v1.Broker/Produce", produce[:-10])
    assert (got.status, got.code) == INVALID, got


def test_worst_allowed_requests_keep_the_coordinator_lease(env: Env) -> None:
    """For three lease TTLs (15 s), four threads send the largest OffsetFetch and
    AddPartitionsToTxn the limits allow (10 topics x 10 000 partitions = 100 000 entries).
    The coordinator keeps its etcd lease (no "lease ... lost" in its log), stays SERVING
    and is still the group coordinator afterwards."""
    tps = [
        coordinator_pb2.TopicPartitions(topic=f"t{i}", partitions=range(D.max_entries))
        for i in range(D.max_total_entries // D.max_entries - 1)
    ]
    fetch = coordinator_pb2.OffsetFetchRequest(group_id="g", partitions=tps).SerializeToString()
    txn = transaction_pb2.AddPartitionsToTxnRequest(
        transactional_id="no-such-txn",
        partitions=[
            transaction_pb2.TxnTopicPartitions(topic=t.topic, partitions=t.partitions) for t in tps
        ],
    ).SerializeToString()
    stop = threading.Event()
    answers: list[Answer] = []

    def hammer(method: str, payload: bytes) -> None:
        while not stop.is_set():
            answers.append(env.call("coordinator", method, payload, timeout=60))

    threads = [
        threading.Thread(target=hammer, args=("/headwater.v1.GroupCoordinator/OffsetFetch", fetch)),
        threading.Thread(target=hammer, args=("/headwater.v1.GroupCoordinator/OffsetFetch", fetch)),
        threading.Thread(
            target=hammer, args=("/headwater.v1.TransactionCoordinator/AddPartitionsToTxn", txn)
        ),
        threading.Thread(
            target=hammer, args=("/headwater.v1.TransactionCoordinator/AddPartitionsToTxn", txn)
        ),
    ]
    for t in threads:
        t.start()
    try:
        stop.wait(15)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert answers, "no answer in 15 s"
    bad = [a for a in answers if a.status != grpc.StatusCode.OK and a.code < 0]
    assert bad == [], bad[:3]
    coordinator = env.procs["coordinator"]
    log = coordinator.log_path.read_text(errors="replace")
    assert re.search(r"lease [0-9a-f]+ (lost|refresh failed)", log) is None, log[-2000:]
    assert env.healthy() == []
    ch = env.channel(env.address("coordinator"))
    found = ch.unary_unary(
        "/headwater.v1.GroupCoordinator/FindCoordinator",
        coordinator_pb2.FindCoordinatorRequest.SerializeToString,
        coordinator_pb2.FindCoordinatorResponse.FromString,
    )
    wait_for(
        lambda: found(coordinator_pb2.FindCoordinatorRequest(group_id="g"), timeout=10).error_code
        == E.NONE,
        timeout=30,
        what="the group coordinator answering",
    )


def test_memory_stays_bounded(env: Env) -> None:
    for kind, p in env.procs.items():
        grown = rss_bytes(p.pid) - env.rss_before[kind]
        assert grown < RSS_BOUND, f"{kind} RSS grew by {grown >> 20} MiB"
