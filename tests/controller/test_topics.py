"""Topic commands against a real controller process and a real etcd.

A stand-in broker (tests/controller/fake_broker.py) registers like a broker and records what
the controller sends, so the controller's side of the contract is checked on its own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from headwater import errors
from headwater.dev.cluster import ServiceProcess
from headwater.platform import etcd as hetcd
from headwater.v1 import broker_pb2, controller_pb2, controller_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from tests.controller.fake_broker import FakeBroker
from tests.helpers.wait import async_wait_for

NT = controller_pb2.NewTopic


def nt(name: str, p: int = 1, rf: int = 1, configs: dict[str, str] | None = None) -> Any:
    return NT(name=name, partitions=p, replication_factor=rf, configs=configs or {})


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 90))


async def _active(stub: Any, cid: int) -> Any:
    r = await stub.DescribeCluster(controller_pb2.DescribeClusterRequest(), timeout=2)
    return r if r.controller_id == cid else None


class Env:
    """One controller process, its stub, an etcd client and one registered fake broker."""

    def __init__(self, proc: ServiceProcess, endpoint: str) -> None:
        self.proc = proc
        self.endpoint = endpoint

    async def __aenter__(self) -> Env:
        self.etcd = await hetcd.Etcd.connect(self.endpoint)
        self.channel = grpc.aio.insecure_channel(self.proc.address)
        self.stub = controller_pb2_grpc.ControllerStub(self.channel)
        await async_wait_for(lambda: _active(self.stub, 1), timeout=20, what="controller active")
        self.broker = FakeBroker(1)
        await self.broker.start(self.etcd)
        await async_wait_for(self._sees_broker, timeout=20, what="controller sees broker 1")
        return self

    async def _sees_broker(self) -> bool:
        # a validate-only RF=1 create succeeds only once the controller counts a live broker
        r = await self.stub.CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[NT(name="probe", partitions=1, replication_factor=1)], validate_only=True
            )
        )
        return bool(r.topics[0].error_code == ErrorCode.NONE)

    async def __aexit__(self, *exc: object) -> None:
        await self.broker.stop()
        await self.channel.close()
        await self.etcd.close()

    async def metadata_keys(self) -> tuple[int, dict[str, bytes]]:
        """Store revision and every topic/partition key (what 'writes nothing' compares)."""
        snap = await self.etcd.get_prefix("/headwater/")
        keys = {
            kv.key: kv.value
            for kv in snap.items
            if kv.key.startswith(("/headwater/topics/", "/headwater/partitions/"))
        }
        return snap.revision, keys

    async def create(self, *topics: Any, validate_only: bool = False) -> list[Any]:
        r = await self.stub.CreateTopics(
            controller_pb2.CreateTopicsRequest(topics=list(topics), validate_only=validate_only)
        )
        return list(r.topics)


@pytest.fixture
def env(start_controller: Callable[[int], ServiceProcess], etcd: str) -> Env:
    return Env(start_controller(1), etcd)


def test_create_topics_validation_errors_write_nothing(env: Env) -> None:
    async def body() -> None:
        async with env:
            await env.create(NT(name="exists", partitions=1, replication_factor=1))
            before = await env.metadata_keys()
            bad_name = ErrorCode.INVALID_TOPIC_EXCEPTION
            bad_parts = ErrorCode.INVALID_PARTITIONS
            bad_rf = ErrorCode.INVALID_REPLICATION_FACTOR
            bad_cfg = ErrorCode.INVALID_CONFIG
            cases = [
                (nt(""), bad_name),
                (nt("."), bad_name),
                (nt(".."), bad_name),
                (nt("a" * 250), bad_name),
                (nt("has space"), bad_name),
                (nt("sl/ash"), bad_name),
                (nt("ünicode"), bad_name),
                (nt("neg", p=-3), bad_parts),
                (nt("huge", p=10_001), bad_parts),
                (nt("rf-neg", rf=-1), bad_rf),
                (nt("rf2", rf=2), bad_rf),
                (nt("cfg", configs={"no.such": "1"}), bad_cfg),
                (nt("cfg2", configs={"retention.ms": "soon"}), bad_cfg),
                (nt("exists"), ErrorCode.TOPIC_ALREADY_EXISTS),
            ]
            for topic, code in cases:
                (res,) = await env.create(topic)
                assert (res.name, ErrorCode.Name(res.error_code)) == (
                    topic.name,
                    ErrorCode.Name(code),
                ), res.error_message
                assert res.error_message
            dup = await env.create(
                NT(name="twice", partitions=1, replication_factor=1),
                NT(name="twice", partitions=2, replication_factor=1),
            )
            assert [r.error_code for r in dup] == [ErrorCode.INVALID_REQUEST] * 2
            ok = await env.create(
                NT(name="valid", partitions=3, replication_factor=1), validate_only=True
            )
            assert ok[0].error_code == ErrorCode.NONE
            assert await env.metadata_keys() == before

    run(body())


def test_create_topic_writes_etcd_and_pushes_to_broker(env: Env) -> None:
    async def body() -> None:
        async with env:
            (res,) = await env.create(
                NT(name="orders.v1", partitions=3, replication_factor=1,
                   configs={"retention.ms": "60000"})
            )  # fmt: skip
            assert res.error_code == ErrorCode.NONE and len(res.topic_id) == 32
            got = await env.etcd.get("/headwater/topics/orders.v1")
            assert got is not None
            topic = json.loads(got[0])
            assert topic == {
                "topic_id": res.topic_id,
                "partitions": {"0": [1], "1": [1], "2": [1]},
                "configs": {"retention.ms": "60000"},
            }
            epoch_raw = await env.etcd.get("/headwater/controller/epoch")
            assert epoch_raw is not None
            epoch = int(epoch_raw[0])
            for p in range(3):
                raw = await env.etcd.get(f"/headwater/partitions/orders.v1/{p}")
                assert raw is not None
                assert json.loads(raw[0]) == {
                    "leader": 1,
                    "leader_epoch": 0,
                    "isr": [1],
                    "partition_epoch": 0,
                    "controller_epoch": epoch,
                }

            def pushed() -> Any:
                for req in env.broker.of(broker_pb2.LeaderAndIsrRequest):
                    parts = [a for a in req.partitions if a.topic == "orders.v1"]
                    if parts:
                        return req, parts
                return None

            req, parts = await async_wait_for(
                _sync(pushed), timeout=10, what="LeaderAndIsr for orders.v1"
            )
            assert len(parts) == 3  # one batched request carries every partition
            assert req.controller_epoch == epoch and req.controller_id == 1
            assert req.broker_epoch == env.broker.epoch
            assert {a.state.partition for a in parts} == {0, 1, 2}
            assert all(a.state.leader == 1 and a.topic_id == res.topic_id for a in parts)
            assert dict(parts[0].configs) == {"retention.ms": "60000"}

            def metadata() -> Any:
                ums = env.broker.of(broker_pb2.UpdateMetadataRequest)
                if ums and any(t.name == "orders.v1" for t in ums[-1].topics):
                    return ums[-1]
                return None

            um = await async_wait_for(_sync(metadata), timeout=10, what="UpdateMetadata")
            assert [b.broker_id for b in um.brokers] == [1]
            assert um.brokers[0].broker_epoch == env.broker.epoch
            assert um.controller.broker_id == 1 and um.controller.port == env.proc.port
            assert um.cluster_id

    run(body())


def test_delete_create_partitions_and_alter_configs(env: Env) -> None:
    async def body() -> None:
        async with env:
            await env.create(NT(name="t", partitions=2, replication_factor=1))
            stub = env.stub
            before = await env.metadata_keys()
            # errors first: each typed, none writes
            r = await stub.DeleteTopics(controller_pb2.DeleteTopicsRequest(names=["nope"]))
            assert r.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            for total in (1, 2):
                cp = await stub.CreatePartitions(
                    controller_pb2.CreatePartitionsRequest(topic="t", total_count=total)
                )
                assert cp.result.error_code == ErrorCode.INVALID_PARTITIONS
            cp = await stub.CreatePartitions(
                controller_pb2.CreatePartitionsRequest(topic="nope", total_count=5)
            )
            assert cp.result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            for req in (
                controller_pb2.AlterTopicConfigsRequest(topic="t", set={"bogus.key": "1"}),
                controller_pb2.AlterTopicConfigsRequest(topic="t", set={"segment.bytes": "-5"}),
                controller_pb2.AlterTopicConfigsRequest(topic="t", delete=["bogus.key"]),
            ):
                ac = await stub.AlterTopicConfigs(req)
                assert ac.result.error_code == ErrorCode.INVALID_CONFIG, ac.result
            ac = await stub.AlterTopicConfigs(
                controller_pb2.AlterTopicConfigsRequest(topic="nope", set={"retention.ms": "1"})
            )
            assert ac.result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert await env.metadata_keys() == before

            # then the successful forms
            cp = await stub.CreatePartitions(
                controller_pb2.CreatePartitionsRequest(topic="t", total_count=5)
            )
            assert cp.result.error_code == ErrorCode.NONE
            raw = await env.etcd.get("/headwater/topics/t")
            assert raw is not None and sorted(json.loads(raw[0])["partitions"]) == list("01234")
            parts = await env.etcd.get_prefix("/headwater/partitions/t/")
            assert len(parts.items) == 5
            ac = await stub.AlterTopicConfigs(
                controller_pb2.AlterTopicConfigsRequest(topic="t", set={"retention.ms": "1000"})
            )
            assert ac.result.error_code == ErrorCode.NONE
            raw = await env.etcd.get("/headwater/topics/t")
            assert raw is not None and json.loads(raw[0])["configs"] == {"retention.ms": "1000"}
            ac = await stub.AlterTopicConfigs(
                controller_pb2.AlterTopicConfigsRequest(topic="t", delete=["retention.ms"])
            )
            assert ac.result.error_code == ErrorCode.NONE
            raw = await env.etcd.get("/headwater/topics/t")
            assert raw is not None and json.loads(raw[0])["configs"] == {}

            r = await stub.DeleteTopics(controller_pb2.DeleteTopicsRequest(names=["t"]))
            assert r.topics[0].error_code == ErrorCode.NONE
            assert await env.etcd.get("/headwater/topics/t") is None
            assert (await env.etcd.get_prefix("/headwater/partitions/t/")).items == []

            def stopped() -> Any:
                reqs = env.broker.of(broker_pb2.StopReplicaRequest)
                return reqs[-1] if reqs else None

            sr = await async_wait_for(_sync(stopped), timeout=10, what="StopReplica")
            assert sorted(p.partition for p in sr.partitions) == [0, 1, 2, 3, 4]
            assert all(p.delete and p.topic == "t" for p in sr.partitions)

    run(body())


def test_broker_loss_and_return_move_leadership_with_epochs(env: Env) -> None:
    async def body() -> None:
        async with env:
            await env.create(NT(name="ha", partitions=2, replication_factor=1))

            async def state(p: int) -> dict[str, Any]:
                raw = await env.etcd.get(f"/headwater/partitions/ha/{p}")
                assert raw is not None
                return dict(json.loads(raw[0]))

            await env.broker.deregister()

            async def offline() -> bool:
                return [(await state(p))["leader"] for p in range(2)] == [-1, -1]

            await async_wait_for(offline, timeout=15, what="leaders offline")
            s = await state(0)
            assert (s["leader_epoch"], s["partition_epoch"], s["isr"]) == (1, 1, [1])
            # RF=1 cannot satisfy RF=1 creates with no live broker
            (res,) = await env.create(NT(name="later", partitions=1, replication_factor=1))
            assert res.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
            # the broker returns (new registration, new epoch): it leads again
            old_epoch = env.broker.epoch
            await env.broker.register(env.etcd)
            assert env.broker.epoch > old_epoch

            async def back() -> bool:
                return [(await state(p))["leader"] for p in range(2)] == [1, 1]

            await async_wait_for(back, timeout=15, what="leaders back")
            s = await state(1)
            assert (s["leader_epoch"], s["partition_epoch"]) == (2, 2)

            def told() -> Any:
                for req in env.broker.of(broker_pb2.LeaderAndIsrRequest):
                    if req.broker_epoch == env.broker.epoch and any(
                        a.topic == "ha" and a.state.leader_epoch == 2 for a in req.partitions
                    ):
                        return req
                return None

            await async_wait_for(_sync(told), timeout=10, what="LeaderAndIsr after return")

    run(body())


def test_standby_answers_mutations_with_not_controller(
    start_controller: Callable[[int], ServiceProcess], etcd: str
) -> None:
    first = start_controller(1)
    second = start_controller(2)

    async def body() -> None:
        async with (
            grpc.aio.insecure_channel(first.address) as ch1,
            grpc.aio.insecure_channel(second.address) as ch2,
        ):
            s1 = controller_pb2_grpc.ControllerStub(ch1)
            s2 = controller_pb2_grpc.ControllerStub(ch2)
            await async_wait_for(lambda: _active(s1, 1), timeout=20, what="controller 1 active")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await s2.CreateTopics(
                    controller_pb2.CreateTopicsRequest(
                        topics=[NT(name="x", partitions=1, replication_factor=1)]
                    )
                )
            exc = errors.from_rpc_error(info.value)
            assert isinstance(exc, errors.NotControllerError)
            assert "the active controller is 1 at" in exc.message
            # the standby still describes the cluster
            d = await s2.DescribeCluster(controller_pb2.DescribeClusterRequest())
            assert d.controller_id == 1 and d.cluster_id

    run(body())


def _sync(fn: Callable[[], Any]) -> Callable[[], Awaitable[Any]]:
    async def wrapper() -> Any:
        return fn()

    return wrapper
