"""The admin client's controller lookup (headwater.client.admin.AsyncAdminClient._call): while
the metadata names no controller yet, as a broker that has just joined answers before its first
UpdateMetadata, the bootstrap brokers answer UNIMPLEMENTED and the call waits (bounded by the
request timeout) for a controller instead of failing at once; an unreachable named controller
still fails without that wait. Pure logic: the metadata and the stubs are fakes."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from headwater import errors
from headwater.client.admin import AsyncAdminClient
from headwater.client.metadata import ClusterView
from headwater.v1 import controller_pb2

pytestmark = pytest.mark.fast


class _Metadata:
    """Names no controller for the first ``blind`` refreshes, then ``controller``."""

    def __init__(self, blind: int, controller: str | None) -> None:
        self.blind, self.controller, self.refreshes = blind, controller, 0

    async def refresh(self) -> ClusterView:
        self.refreshes += 1
        if self.refreshes <= self.blind:
            return ClusterView()
        return ClusterView(controller_address=self.controller)

    async def close(self) -> None:
        return None


class _Stub:
    def __init__(self, address: str, controller: str, calls: list[str]) -> None:
        self.address, self.controller, self.calls = address, controller, calls

    async def DescribeCluster(self, request: Any, timeout: float) -> Any:
        self.calls.append(self.address)
        if self.address != self.controller:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNIMPLEMENTED,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                "Method not found!",
            )
        return controller_pb2.DescribeClusterResponse(cluster_id="c")


class _Pool:
    def __init__(self, controller: str) -> None:
        self.controller_address = controller
        self.calls: list[str] = []

    def controller(self, address: str) -> _Stub:
        return _Stub(address, self.controller_address, self.calls)

    async def close(self) -> None:
        return None


def _admin(metadata: _Metadata, pool: _Pool, timeout_ms: int) -> AsyncAdminClient:
    admin = AsyncAdminClient("127.0.0.1:1", request_timeout_ms=timeout_ms)
    admin._metadata = metadata  # type: ignore[assignment]
    admin._pool = pool  # type: ignore[assignment]
    return admin


def test_waits_for_the_metadata_to_name_a_controller() -> None:
    metadata, pool = _Metadata(blind=4, controller="127.0.0.1:2"), _Pool("127.0.0.1:2")
    admin = _admin(metadata, pool, timeout_ms=10_000)
    resp = asyncio.run(admin._call("DescribeCluster", controller_pb2.DescribeClusterRequest()))
    assert resp.cluster_id == "c"
    assert metadata.refreshes == 5  # four without a controller, then the one naming it
    assert pool.calls == ["127.0.0.1:1"] * 4 + ["127.0.0.1:2"]


def test_no_controller_ever_named_fails_with_the_bootstrap_error_after_the_timeout() -> None:
    metadata, pool = _Metadata(blind=10**9, controller=None), _Pool("127.0.0.1:2")
    admin = _admin(metadata, pool, timeout_ms=300)
    with pytest.raises(errors.UnsupportedVersionError):
        asyncio.run(admin._call("DescribeCluster", controller_pb2.DescribeClusterRequest()))
    assert 2 < metadata.refreshes < 20  # retried with backoff, bounded by the timeout


def test_a_named_but_unreachable_controller_is_not_waited_for() -> None:
    metadata, pool = _Metadata(blind=0, controller="127.0.0.1:3"), _Pool("127.0.0.1:2")
    admin = _admin(metadata, pool, timeout_ms=60_000)
    with pytest.raises(errors.UnsupportedVersionError):
        asyncio.run(admin._call("DescribeCluster", controller_pb2.DescribeClusterRequest()))
    assert metadata.refreshes == 2 and pool.calls == ["127.0.0.1:3", "127.0.0.1:3"]  # no backoff
