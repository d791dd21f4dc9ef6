"""Coordinator discovery: a registration under /headwater/coordinators/ids/ reaches clients
through the controller's UpdateMetadata and the broker's Metadata answer (real processes)."""

from __future__ import annotations

import asyncio
import json

import grpc

from headwater.dev.cluster import LocalCluster
from headwater.platform import etcd as hetcd
from headwater.v1 import broker_pb2_grpc, metadata_pb2
from services.controller.coordinators import COORDINATORS_PREFIX
from tests.helpers.wait import wait_for


def _coordinators(address: str) -> list[tuple[int, str, int]]:
    with grpc.insecure_channel(address) as ch:
        resp = broker_pb2_grpc.BrokerStub(ch).Metadata(metadata_pb2.MetadataRequest(), timeout=5)
    return [(c.broker_id, c.host, c.port) for c in resp.coordinators]


def test_registered_coordinators_appear_in_metadata(cluster: LocalCluster) -> None:
    key = f"{COORDINATORS_PREFIX}7"
    value = json.dumps({"coordinator_id": 7, "host": "127.0.0.1", "port": 4242, "metrics_url": ""})

    async def put(delete: bool) -> None:
        client = await hetcd.Etcd.connect(cluster.etcd.endpoint)
        try:
            if delete:
                await client.delete(key)
            else:
                await client.put(key, value)
        finally:
            await client.close()

    asyncio.run(put(False))
    wait_for(
        lambda: _coordinators(cluster.bootstrap) == [(7, "127.0.0.1", 4242)],
        timeout=20,
        what="the coordinator in the broker's Metadata",
    )
    asyncio.run(put(True))
    wait_for(
        lambda: _coordinators(cluster.bootstrap) == [],
        timeout=20,
        what="the coordinator gone from the broker's Metadata",
    )
