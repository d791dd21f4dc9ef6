"""The cluster's internal identity for tests that play a service's part (the controller
sending LeaderAndIsr, a coordinator sending WriteTxnMarkers, a broker sending AlterPartition).

Whoever can read etcd is the cluster (docs/security.md): like a service, the test reads the
cluster token key from etcd and mints an *internal* token; a plain channel gets
CLUSTER_AUTHORIZATION_FAILED from every internal RPC.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from headwater.client.auth import AUTHORIZATION_METADATA_KEY, bearer_interceptors
from headwater.platform import etcd as hetcd
from headwater.platform.auth import tokens
from headwater.platform.auth.service import DEFAULT_SERVICE_USER, LocalTokenSource


def cluster_key(endpoint: str, **etcd_kwargs: Any) -> bytes:
    """The cluster token key (a service must have started: it creates the key)."""

    async def run() -> bytes:
        client = await hetcd.Etcd.connect(endpoint, **etcd_kwargs)
        try:
            got = await client.get(tokens.TOKEN_KEY_PATH)
        finally:
            await client.close()
        assert got is not None, "no cluster token key in etcd yet (no service started)"
        return got[0]

    return asyncio.run(run())


def registration_epoch(endpoint: str, broker_id: int, **etcd_kwargs: Any) -> int:
    """A broker's epoch (its registration's create revision), -1 when not registered: read
    from etcd, where the cluster keeps it (Metadata and DescribeCluster do not show it)."""

    async def run() -> int:
        client = await hetcd.Etcd.connect(endpoint, **etcd_kwargs)
        try:
            got = await client.get(f"/headwater/brokers/ids/{broker_id}")
        finally:
            await client.close()
        return got[1].create_revision if got else -1

    return asyncio.run(run())


def internal_source(key: bytes, user: str = DEFAULT_SERVICE_USER) -> LocalTokenSource:
    return LocalTokenSource(key, user, internal=True)


class _Metadata(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds ``authorization: Bearer <token>`` to every call of a synchronous channel."""

    def __init__(self, source: LocalTokenSource) -> None:
        self._source = source

    def _details(self, details: Any) -> Any:
        metadata = [*(details.metadata or ())]
        metadata.append((AUTHORIZATION_METADATA_KEY, f"Bearer {self._source.current()}"))
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


def with_token(channel: grpc.Channel, source: LocalTokenSource) -> grpc.Channel:
    """``channel`` (synchronous) with every call carrying ``source``'s token."""
    return grpc.intercept_channel(channel, _Metadata(source))


def internal_channel(address: str, key: bytes, **options: Any) -> grpc.Channel:
    """A plaintext synchronous channel speaking as the cluster itself."""
    return with_token(grpc.insecure_channel(address, **options), internal_source(key))


def aio_interceptors(key: bytes, target: str = "") -> list[grpc.aio.ClientInterceptor]:
    """Interceptors for a ``grpc.aio`` channel speaking as the cluster itself."""
    return bearer_interceptors(internal_source(key), target)
