"""Addresses of and gRPC channels to other brokers and to the active controller.

A broker's address comes from the metadata cache (the brokers list of the last UpdateMetadata)
unless ``--peer-override ID=HOST:PORT`` names another one for that broker id: the override is
used for broker-to-broker connections only (the fault harness routes replication through TCP
proxies with it); clients keep seeing the registered address. The controller's address is the
metadata cache's ``controller`` endpoint.

Channels are cached per address and owned by this object (event loop only); ``close`` closes
them all. With ``credentials`` (the broker's TLS identity: its CA and its own certificate as
client certificate, from ``ServerSecurity.client_security()``) every channel is TLS.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import grpc

from headwater.client.auth import channel_interceptors
from services.broker.metadata_cache import MetadataCache

#: Replication messages carry whole batches; allow large ones.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # reconnect fast after a peer restarts (defaults back off up to 2 minutes)
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.min_reconnect_backoff_ms", 100),
]


def parse_overrides(items: list[str]) -> dict[int, str]:
    """``["2=127.0.0.1:9000", ...]`` -> ``{2: "127.0.0.1:9000"}``; ValueError when malformed."""
    out: dict[int, str] = {}
    for item in items:
        bid, sep, addr = item.partition("=")
        host, colon, port = addr.rpartition(":")
        if not sep or not colon or not host or not port.isdigit() or not bid.strip().isdigit():
            raise ValueError(f"--peer-override wants ID=HOST:PORT, got {item!r}")
        out[int(bid)] = addr
    return out


class Peers:
    """Where brokers and the controller are, and channels to them."""

    def __init__(
        self,
        metadata: MetadataCache,
        overrides: Mapping[int, str] | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ):
        self.metadata = metadata
        self.overrides = dict(overrides or {})
        self.credentials = credentials
        self._channels: dict[str, grpc.aio.Channel] = {}

    def broker_address(self, broker_id: int) -> str | None:
        if broker_id in self.overrides:
            return self.overrides[broker_id]
        b = self.metadata.broker(broker_id)
        return None if b is None or not b.port else f"{b.host}:{b.port}"

    def controller_address(self) -> str | None:
        c = self.metadata.controller
        return None if c is None or not c.port else f"{c.host}:{c.port}"

    def channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            if self.credentials is not None:
                ch = grpc.aio.secure_channel(
                    address,
                    self.credentials,
                    options=CHANNEL_OPTIONS,
                    interceptors=channel_interceptors(address),
                )
            else:
                ch = grpc.aio.insecure_channel(
                    address, options=CHANNEL_OPTIONS, interceptors=channel_interceptors(address)
                )
            self._channels[address] = ch
        return ch

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for ch in channels:
            with contextlib.suppress(Exception):
                await ch.close()
