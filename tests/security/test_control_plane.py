"""The control plane is closed by default (issue 15 item 5), against real processes (etcd,
1 controller, 2 brokers, 1 coordinator; no TLS, no client authentication, no authorizer):

* every internal RPC (enumerated from the service descriptors and the rules table, so a new
  one is covered) refuses a plain client, and a SCRAM user named like the services' internal
  identity, with PERMISSION_DENIED + CLUSTER_AUTHORIZATION_FAILED — each call crafted to do
  harm if it got through (delete a leader's data, make a follower lead, wipe metadata, append
  a marker, shrink an ISR, move leaderships) — and nothing changes;
* Metadata shows no broker, controller or partition epochs;
* a control request with a controller epoch etcd does not hold is refused, even from the
  cluster's own identity, and the broker keeps obeying the real controller.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory

from headwater import errors
from headwater.client.admin import AsyncAdminClient, NewTopic
from headwater.client.auth import ScramTokenSource
from headwater.dev.cluster import LocalCluster
from headwater.platform import etcd as hetcd
from headwater.platform.auth import rules, tokens
from headwater.platform.auth.service import DEFAULT_SERVICE_USER
from headwater.platform.cluster_layout import EPOCH_KEY
from headwater.v1 import (
    broker_pb2,
    controller_pb2,
    controller_pb2_grpc,
    coordinator_pb2,
    metadata_pb2,
    security_pb2,
    transaction_pb2,
)
from headwater.v1 import coordinator_pb2 as cpb
from headwater.v1.errors_pb2 import ErrorCode as E
from tests.fuzz.hostile import GOOD, ClusterView
from tests.helpers.internal import cluster_key, internal_channel, registration_epoch
from tests.helpers.wait import wait_for

T = "ctl"  # 2 partitions, replication factor 2
I32_MAX = 2**31 - 1
SERVICES = [
    broker_pb2.DESCRIPTOR.services_by_name["Broker"],
    controller_pb2.DESCRIPTOR.services_by_name["Controller"],
    coordinator_pb2.DESCRIPTOR.services_by_name["GroupCoordinator"],
    transaction_pb2.DESCRIPTOR.services_by_name["TransactionCoordinator"],
    security_pb2.DESCRIPTOR.services_by_name["Authenticator"],
]
#: The internal RPCs this test must find (the enumeration is not vacuous).
KNOWN_INTERNAL = {
    "/headwater.v1.Broker/LeaderAndIsr",
    "/headwater.v1.Broker/StopReplica",
    "/headwater.v1.Broker/UpdateMetadata",
    "/headwater.v1.Broker/ReplicaFetch",
    "/headwater.v1.Broker/WriteTxnMarkers",
    "/headwater.v1.Broker/ControllerLiveness",
    "/headwater.v1.GroupCoordinator/WriteTxnOffsetMarker",
    "/headwater.v1.Controller/AlterPartition",
    "/headwater.v1.Controller/ControlledShutdown",
}


def _path(method: Any) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def internal_methods() -> list[Any]:
    """Every method of every service whose rule is internal (or that has no rule at all)."""
    return [
        m
        for svc in SERVICES
        for m in svc.methods
        if _path(m) not in rules.RULES or rules.rule_for(_path(m)).internal
    ]


def _etcd(endpoint: str, fn: Callable[[hetcd.Etcd], Any]) -> Any:
    async def run() -> Any:
        client = await hetcd.Etcd.connect(endpoint)
        try:
            return await fn(client)
        finally:
            await client.close()

    return asyncio.run(run())


class Env:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.view = ClusterView(cluster)
        self.endpoint = cluster.etcd.endpoint

    def address_of(self, method: Any, broker_id: int = 1) -> str:
        svc = method.containing_service.name
        if svc == "Controller":
            return self.cluster.controller_addresses[0]
        if svc in ("GroupCoordinator", "TransactionCoordinator"):
            return self.cluster.coordinator_addresses[0]
        return self.cluster.brokers[broker_id].address

    def controller_epoch(self) -> int:
        got = _etcd(self.endpoint, lambda c: c.get(EPOCH_KEY))
        return int(got[0])

    def partition_epoch(self, topic: str, partition: int) -> int:
        got = _etcd(self.endpoint, lambda c: c.get(f"/headwater/partitions/{topic}/{partition}"))
        return int(json.loads(got[0])["partition_epoch"])

    def snapshot(self) -> tuple[dict[int, tuple[int, int, list[int]]], dict[int, int], set[str]]:
        states = {
            p: (s.leader, s.leader_epoch, sorted(s.isr)) for p, s in self.view.partitions(T).items()
        }
        return states, self.view.end_offsets(T), self.view.topics()

    def produce(self, topic: str = T, partition: int = 0) -> int:
        leader = self.view.leader(topic, partition)
        r = self.view.broker_stub(leader).Produce(
            broker_pb2.ProduceRequest(
                acks=broker_pb2.ACKS_ALL,
                timeout_ms=10_000,
                partitions=[
                    broker_pb2.PartitionRecords(topic=topic, partition=partition, records=GOOD)
                ],
            ),
            timeout=60,
        )
        return int(r.partitions[0].error_code)

    def harmful(self, method: Any) -> tuple[Any, int]:
        """A request that would do damage if accepted, and the broker to send it to."""
        cls = message_factory.GetMessageClass(method.input_type)
        states = self.view.partitions(T)
        s0 = states[0]
        leader = s0.leader
        follower = next(r for r in s0.replicas if r != leader)
        epoch = self.controller_epoch()
        name = method.name
        if name == "StopReplica":  # the call: delete the leader's data, lock it out
            return broker_pb2.StopReplicaRequest(
                controller_id=1,
                controller_epoch=I32_MAX,
                broker_epoch=registration_epoch(self.endpoint, leader),
                partitions=[broker_pb2.StopReplicaPartition(topic=T, partition=0, delete=True)],
            ), leader
        if name == "LeaderAndIsr":  # make the follower believe it leads (two leaders)
            state = metadata_pb2.PartitionState()
            state.CopyFrom(s0)
            state.leader, state.leader_epoch = follower, s0.leader_epoch + 1
            return broker_pb2.LeaderAndIsrRequest(
                controller_id=1,
                controller_epoch=epoch,
                broker_epoch=registration_epoch(self.endpoint, follower),
                partitions=[broker_pb2.PartitionAssignment(topic=T, state=state)],
            ), follower
        if name == "UpdateMetadata":  # an empty cluster view
            return broker_pb2.UpdateMetadataRequest(
                controller_id=1,
                controller_epoch=epoch,
                broker_epoch=registration_epoch(self.endpoint, leader),
            ), leader
        if name == "WriteTxnMarkers":  # a control batch appended to the leader's log
            return broker_pb2.WriteTxnMarkersRequest(
                markers=[
                    broker_pb2.WriteTxnMarker(
                        producer_id=1,
                        producer_epoch=0,
                        partitions=[broker_pb2.TxnMarkerPartition(topic=T, partition=0)],
                    )
                ]
            ), leader
        if name == "ReplicaFetch":  # a fetch session as the follower (moves the HW/ISR)
            return broker_pb2.ReplicaFetchRequest(
                replica_id=follower,
                broker_epoch=registration_epoch(self.endpoint, follower),
                max_wait_ms=10,
                partitions=[broker_pb2.ReplicaFetchPartition(topic=T, partition=0)],
            ), leader
        if name == "AlterPartition":  # shrink the ISR to the leader alone
            return controller_pb2.AlterPartitionRequest(
                broker_id=leader,
                broker_epoch=registration_epoch(self.endpoint, leader),
                partitions=[
                    controller_pb2.AlterPartitionItem(
                        topic=T,
                        partition=0,
                        leader_epoch=s0.leader_epoch,
                        partition_epoch=self.partition_epoch(T, 0),
                        new_isr=[leader],
                    )
                ],
            ), leader
        if name == "ControlledShutdown":  # move the leaderships away
            return controller_pb2.ControlledShutdownRequest(
                broker_id=leader, broker_epoch=registration_epoch(self.endpoint, leader)
            ), leader
        if name == "ControllerLiveness":  # pose as the controller watching the leader
            return broker_pb2.ControllerLivenessRequest(
                controller_id=1,
                controller_epoch=epoch,
                broker_epoch=registration_epoch(self.endpoint, leader),
            ), leader
        if name == "WriteTxnOffsetMarker":
            return cpb.WriteTxnOffsetMarkerRequest(
                group_id="g", producer_id=1, producer_epoch=0, committed=True
            ), leader
        return cls(), leader


def call(channel: grpc.Channel, method: Any, request: Any, **kw: Any) -> Any:
    """Call ``method`` generically (unary or bidirectional stream) and return the first
    answer; raises grpc.RpcError."""
    out_cls = message_factory.GetMessageClass(method.output_type)
    args = {
        "request_serializer": type(request).SerializeToString,
        "response_deserializer": out_cls.FromString,
    }
    path = _path(method)
    if method.client_streaming and method.server_streaming:
        stream = channel.stream_stream(path, **args)(iter([request]), timeout=30, **kw)
        try:
            return next(iter(stream))
        finally:
            stream.cancel()
    if method.server_streaming:
        stream = channel.unary_stream(path, **args)(request, timeout=30, **kw)
        try:
            return next(iter(stream))
        finally:
            stream.cancel()
    return channel.unary_unary(path, **args)(request, timeout=30, **kw)


def refused_code(
    channel: grpc.Channel, method: Any, request: Any, **kw: Any
) -> tuple[grpc.StatusCode | None, int]:
    """The status and wire error code of a refused call ((None, 0) when it was answered)."""
    try:
        call(channel, method, request, **kw)
    except grpc.RpcError as err:
        return err.code(), errors.from_rpc_error(err).code
    return None, 0


def _led(env: Env, topic: str, partitions: int) -> bool:
    states = env.view.partitions(topic)
    return len(states) == partitions and all(
        s.leader >= 0 and len(s.isr) == len(s.replicas) for s in states.values()
    )


def _create(env: Env, name: str) -> None:
    async def run() -> None:
        admin = AsyncAdminClient(env.cluster.bootstrap_servers)
        try:
            await admin.create_topics([NewTopic(name, 2, 2)])
        finally:
            await admin.close()

    asyncio.run(run())
    wait_for(lambda: _led(env, name, 2), timeout=60, what=f"leaders and full ISR of {name}")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with LocalCluster(
        tmp_path_factory.mktemp("ctlplane"),
        brokers=2,
        controllers=1,
        coordinators=1,
        etcd_unsafe_no_fsync=True,
    ) as cluster:
        e = Env(cluster)
        _create(e, T)
        wait_for(lambda: e.produce() == E.NONE, timeout=30, what="the first produce")
        try:
            yield e
        finally:
            e.view.close()


def test_the_internal_rpcs_are_enumerated() -> None:
    found = {_path(m) for m in internal_methods()}
    assert found >= KNOWN_INTERNAL, KNOWN_INTERNAL - found
    assert found == rules.INTERNAL  # every descriptor method has a rule (test_acls_rules)
    assert rules.rule_for("/headwater.v1.Broker/ANewRpcWithoutARule").internal  # closed
    # the rules table's internal methods are exactly the unconditional ClusterAction ones
    for method, rule in rules.RULES.items():
        if rule.internal:
            needs = list(rule.needs(None if rule.streaming else broker_pb2.FetchRequest()))
            assert [n.check[1] for n in needs] == [rules.CLUSTER_ACTION], method


def _check_all_refused(env: Env, metadata: list[tuple[str, str]]) -> list[str]:
    before = env.snapshot()
    controller_epoch = env.controller_epoch()
    refused = []
    for method in internal_methods():
        request, broker_id = env.harmful(method)
        channel = env.view.channel(env.address_of(method, broker_id))
        status, code = refused_code(channel, method, request, metadata=metadata)
        assert (status, code) == (
            grpc.StatusCode.PERMISSION_DENIED,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ), f"{_path(method)}: {status} {E.Name(code) if code in E.values() else code}"
        refused.append(_path(method))
    assert env.snapshot() == before, "an internal RPC changed the cluster"
    assert env.controller_epoch() == controller_epoch
    assert env.produce() == E.NONE and env.produce(partition=1) == E.NONE
    return refused


def test_a_plain_client_cannot_call_any_internal_rpc(env: Env) -> None:
    refused = _check_all_refused(env, metadata=[])
    assert set(refused) >= KNOWN_INTERNAL


def test_a_user_token_named_like_the_services_is_not_internal(env: Env) -> None:
    """With the authorizer off anyone may create SCRAM users: one named like the services'
    internal identity gets a valid token, which still is no internal token."""
    password = "not-the-cluster"

    async def token() -> str:
        admin = AsyncAdminClient(env.cluster.bootstrap_servers)
        try:
            await admin.alter_user_scram_credentials(
                [(DEFAULT_SERVICE_USER, "SCRAM-SHA-256", password)]
            )
        finally:
            await admin.close()
        source = ScramTokenSource(
            DEFAULT_SERVICE_USER, password, "SCRAM-SHA-256", grpc.aio.insecure_channel
        )
        return await source.token(env.cluster.brokers[1].address)

    bearer = asyncio.run(token())
    key = cluster_key(env.endpoint)
    ident = tokens.verify_identity(key, bearer)
    assert ident == tokens.Identity(DEFAULT_SERVICE_USER, internal=False)
    _check_all_refused(env, metadata=[("authorization", f"Bearer {bearer}")])


def test_the_internal_claim_cannot_be_added_to_a_user_token() -> None:
    key = b"k" * 32
    user_token, _ = tokens.mint(key, "headwater-service")
    body, _, sig = user_token.partition(".")
    payload = json.loads(tokens._unb64(body))
    payload["i"] = 1
    forged = tokens._b64(json.dumps(payload).encode()) + "." + sig
    with pytest.raises(tokens.InvalidTokenError):
        tokens.verify_identity(key, forged)
    internal, _ = tokens.mint(key, "headwater-service", internal=True)
    assert tokens.verify_identity(key, internal).internal
    with pytest.raises(tokens.InvalidTokenError):  # another cluster's key
        tokens.verify_identity(b"o" * 32, internal)


def test_metadata_shows_no_epochs(env: Env) -> None:
    assert env.controller_epoch() >= 1 and registration_epoch(env.endpoint, 1) > 0
    for broker_id in env.cluster.brokers:
        md = env.view.broker_stub(broker_id).Metadata(metadata_pb2.MetadataRequest(), timeout=10)
        assert len(md.brokers) == 2 and md.HasField("controller") and md.coordinators
        for b in [*md.brokers, md.controller, *md.coordinators]:
            assert b.broker_epoch == 0, b
        for t in md.topics:
            for p in t.partitions:
                assert p.controller_epoch == 0 and p.partition_epoch == 0, p
                assert p.leader >= 0 and p.replicas and p.isr  # what Kafka clients see
    with grpc.insecure_channel(env.cluster.controller_addresses[0]) as ch:
        d = controller_pb2_grpc.ControllerStub(ch).DescribeCluster(
            controller_pb2.DescribeClusterRequest(), timeout=10
        )
    assert len(d.brokers) == 2 and all(b.broker_epoch == 0 for b in d.brokers)


def test_a_controller_epoch_etcd_does_not_hold_is_refused(env: Env) -> None:
    """Even with the internal identity (a buggy or compromised service), a forged higher
    controller epoch changes nothing, and the broker still obeys the real controller."""
    method = broker_pb2.DESCRIPTOR.services_by_name["Broker"].methods_by_name["StopReplica"]
    request, leader = env.harmful(method)
    before = env.snapshot()
    epoch = env.controller_epoch()
    stub_channel = internal_channel(env.cluster.brokers[leader].address, cluster_key(env.endpoint))
    with stub_channel:
        resp = call(stub_channel, method, request)
    assert resp.error_code == E.STALE_CONTROLLER_EPOCH, resp
    assert env.snapshot() == before and env.controller_epoch() == epoch
    assert env.produce() == E.NONE
    # the real controller's next requests (LeaderAndIsr, UpdateMetadata) are obeyed
    _create(env, "ctl-after")
    assert env.produce("ctl-after", 0) == E.NONE and env.produce("ctl-after", 1) == E.NONE
    for broker_id in env.cluster.brokers:
        md = env.view.broker_stub(broker_id).Metadata(
            metadata_pb2.MetadataRequest(topics=["ctl-after"]), timeout=10
        )
        assert md.topics[0].error_code == E.NONE
