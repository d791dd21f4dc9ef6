"""A test environment for controller operations: real controller processes (one or two)
against the real session etcd, N stand-in brokers (tests/controller/fake_broker.py) that
register like brokers, and helpers that read partition state straight from etcd.

The stand-ins let a test play the partition leader's part (AlterPartition) and kill a broker
instantly (revoking its lease), so the controller's side is checked deterministically.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from headwater.dev.cluster import ServiceProcess
from headwater.platform import etcd as hetcd
from headwater.platform.auth import tokens
from headwater.v1 import controller_pb2, controller_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from tests.controller.fake_broker import FakeBroker
from tests.helpers.internal import aio_interceptors
from tests.helpers.wait import async_wait_for


def sync(fn: Callable[[], Any]) -> Callable[[], Awaitable[Any]]:
    async def call() -> Any:
        return fn()

    return call


class OpsEnv:
    """Controllers ``procs`` (the first becomes active), brokers 1..n."""

    def __init__(self, procs: list[ServiceProcess], endpoint: str, brokers: int) -> None:
        self.procs = procs
        self.endpoint = endpoint
        self.n = brokers
        self.brokers: dict[int, FakeBroker] = {}
        self._channels: list[grpc.aio.Channel] = []

    async def __aenter__(self) -> OpsEnv:
        self.etcd = await hetcd.Etcd.connect(self.endpoint)
        # the stand-in brokers call internal RPCs (AlterPartition, ControlledShutdown): they
        # speak with the cluster's internal identity, as brokers do
        key = await async_wait_for(
            lambda: self.etcd.get(tokens.TOKEN_KEY_PATH), timeout=20, what="cluster token key"
        )
        self.stubs = []
        for proc in self.procs:
            ch = grpc.aio.insecure_channel(
                proc.address, interceptors=aio_interceptors(key[0], proc.address)
            )
            self._channels.append(ch)
            self.stubs.append(controller_pb2_grpc.ControllerStub(ch))
        self.stub = self.stubs[0]
        await self.wait_active(self.stub)
        for bid in range(1, self.n + 1):
            self.brokers[bid] = FakeBroker(bid)
            await self.brokers[bid].start(self.etcd)
        await async_wait_for(
            lambda: self.sees_brokers(self.stub, self.n), timeout=20, what="brokers seen"
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        for b in self.brokers.values():
            await b.stop()
        for ch in self._channels:
            await ch.close()
        await self.etcd.close()

    async def wait_active(self, stub: Any, timeout: float = 30) -> None:
        async def mutates() -> bool:
            try:
                await stub.ListPartitionReassignments(
                    controller_pb2.ListPartitionReassignmentsRequest(), timeout=2
                )
            except grpc.RpcError:
                return False
            return True

        await async_wait_for(mutates, timeout=timeout, what="an active controller")

    async def sees_brokers(self, stub: Any, n: int) -> bool:
        """A validate-only create with RF=n succeeds once the controller counts n brokers."""
        r = await stub.CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[controller_pb2.NewTopic(name="probe", partitions=1, replication_factor=n)],
                validate_only=True,
            )
        )
        return bool(r.topics[0].error_code == ErrorCode.NONE)

    async def create(
        self, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None
    ) -> None:
        r = await self.stub.CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[
                    controller_pb2.NewTopic(
                        name=name,
                        partitions=partitions,
                        replication_factor=rf,
                        configs=configs or {},
                    )
                ]
            )
        )
        assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0].error_message

    async def state(self, topic: str, p: int) -> dict[str, Any]:
        raw = await self.etcd.get(f"/headwater/partitions/{topic}/{p}")
        assert raw is not None, f"{topic}-{p} has no state"
        return dict(json.loads(raw[0]))

    async def replicas(self, topic: str, p: int) -> list[int]:
        raw = await self.etcd.get(f"/headwater/topics/{topic}")
        assert raw is not None
        return [int(b) for b in json.loads(raw[0])["partitions"][str(p)]]

    async def snapshot(self) -> dict[str, tuple[bytes, int]]:
        """Every topic/partition key with its value and mod revision ("nothing written")."""
        snap = await self.etcd.get_prefix("/headwater/")
        return {
            kv.key: (kv.value, kv.meta.mod_revision)
            for kv in snap.items
            if kv.key.startswith(("/headwater/topics/", "/headwater/partitions/"))
        }

    async def alter_isr(
        self,
        topic: str,
        p: int,
        new_isr: list[int],
        *,
        broker: int | None = None,
        broker_epoch: int | None = None,
        leader_epoch: int | None = None,
        partition_epoch: int | None = None,
        stub: Any = None,
    ) -> Any:
        """AlterPartition as the partition's leader (or ``broker``), with the current epochs
        unless given."""
        s = await self.state(topic, p)
        bid = s["leader"] if broker is None else broker
        req = controller_pb2.AlterPartitionRequest(
            broker_id=bid,
            broker_epoch=self.brokers[bid].epoch if broker_epoch is None else broker_epoch,
            partitions=[
                controller_pb2.AlterPartitionItem(
                    topic=topic,
                    partition=p,
                    leader_epoch=s["leader_epoch"] if leader_epoch is None else leader_epoch,
                    partition_epoch=(
                        s["partition_epoch"] if partition_epoch is None else partition_epoch
                    ),
                    new_isr=new_isr,
                )
            ],
        )
        return await (stub or self.stub).AlterPartition(req, timeout=10)
