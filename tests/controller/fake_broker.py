"""A stand-in broker for controller tests: registers in etcd like a broker (JSON under a
lease) and records the LeaderAndIsr / UpdateMetadata / StopReplica requests it receives.

It stands in for the real broker (services/broker) only so the controller's side of the
contract can be checked on its own; whole-cluster behaviour is tested with real brokers.
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from headwater.platform import cluster_layout
from headwater.platform import etcd as hetcd
from headwater.v1 import broker_pb2, broker_pb2_grpc


class FakeBroker(broker_pb2_grpc.BrokerServicer):
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.received: list[Any] = []
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.lease: hetcd.LeaseKeeper | None = None
        self.epoch = 0

    async def LeaderAndIsr(self, request: Any, context: Any) -> Any:
        self.received.append(request)
        return broker_pb2.LeaderAndIsrResponse()

    async def UpdateMetadata(self, request: Any, context: Any) -> Any:
        self.received.append(request)
        return broker_pb2.UpdateMetadataResponse()

    async def StopReplica(self, request: Any, context: Any) -> Any:
        self.received.append(request)
        return broker_pb2.StopReplicaResponse()

    def of(self, kind: type) -> list[Any]:
        return [r for r in self.received if isinstance(r, kind)]

    async def start(self, etcd: hetcd.Etcd, rack: str = "") -> None:
        self.server = grpc.aio.server()
        broker_pb2_grpc.add_BrokerServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        await self.register(etcd, rack)

    async def register(self, etcd: hetcd.Etcd, rack: str = "") -> None:
        self.lease = await etcd.grant_lease(10, name=f"fake-broker-{self.broker_id}")
        value = {
            "broker_id": self.broker_id,
            "host": "127.0.0.1",
            "port": self.port,
            "rack": rack,
            "metrics_url": "",
        }
        await etcd.put(
            cluster_layout.broker_key(self.broker_id), json.dumps(value), lease=self.lease
        )
        got = await etcd.get(cluster_layout.broker_key(self.broker_id))
        assert got is not None
        self.epoch = got[1].create_revision

    async def deregister(self) -> None:
        if self.lease is not None:
            await self.lease.revoke()
            self.lease = None

    async def stop(self) -> None:
        await self.deregister()
        if self.server is not None:
            await self.server.stop(0)
