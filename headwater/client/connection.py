"""One gRPC channel per broker address, shared by everything a client does.

A :class:`ConnectionPool` belongs to one client object and one event loop; channels are
created lazily on first use (``grpc.aio`` channels connect in the background) with the
options of :func:`headwater.platform.server.channel_options` (64 MiB messages, keepalive).

Security (:mod:`headwater.client.security`): with a TLS ``security`` every channel is a
``secure_channel`` with the CA / client certificate of the :class:`ClientSecurity` (credentials
read once per pool); without one (and no process default) channels are plaintext.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from headwater.client.auth import (
    ScramTokenSource,
    TokenSource,
    bearer_interceptors,
    default_token_source,
)
from headwater.client.fetch_wire import decode_fetch_response
from headwater.client.grpc_options import channel_options
from headwater.client.security import ClientSecurity, default_security
from headwater.errors import InvalidConfigError
from headwater.v1 import broker_pb2, broker_pb2_grpc, controller_pb2_grpc, coordinator_pb2_grpc

_PRODUCE_METHOD = "/headwater.v1.Broker/Produce"
_FETCH_METHOD = "/headwater.v1.Broker/Fetch"


def parse_bootstrap(bootstrap: str | list[str] | tuple[str, ...]) -> list[str]:
    """``"h1:p1,h2:p2"`` (or a list) -> ``["h1:p1", "h2:p2"]``; raises InvalidConfigError."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out: list[str] = []
    for raw in items:
        addr = raw.strip()
        if not addr:
            continue
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidConfigError(f"bad address {addr!r}: expected HOST:PORT")
        out.append(addr)
    if not out:
        raise InvalidConfigError("no bootstrap address given (HOST:PORT[,HOST:PORT...])")
    return out


class ConnectionPool:
    """Channels and stubs by address. Owned by one event loop; ``close`` ends them all."""

    def __init__(
        self,
        max_message_bytes: int | None = None,
        *,
        address_resolver: Callable[[str], str] | None = None,
        security: ClientSecurity | None = None,
        token_source: TokenSource | None = None,
    ) -> None:
        #: Maps an address (bootstrap or advertised ``host:port``) to the one to dial: for
        #: port-forwards and NAT, where brokers advertise addresses the client cannot reach,
        #: and for fault tests that route client links through proxies. Identity by default.
        self._resolve = address_resolver or (lambda address: address)
        self._options = (
            channel_options() if max_message_bytes is None else channel_options(max_message_bytes)
        )
        #: None: plaintext. Defaults to the process default (set_default_security).
        self.security = security if security is not None else default_security()
        self._credentials: grpc.ChannelCredentials | None = None
        if self.security is not None and self.security.tls:
            self._credentials = self.security.channel_credentials()
            self._options = self._options + self.security.channel_options()
        #: Bearer tokens (authentication): a service's own source, else SCRAM with the
        #: security's username/password (authenticating on first use), else none.
        self.token_source: TokenSource | None = token_source or default_token_source()
        if self.security is not None and self.security.username:
            assert self.security.password is not None
            self.token_source = ScramTokenSource(
                self.security.username,
                self.security.password,
                self.security.mechanism,
                self._plain_channel,
            )
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._brokers: dict[str, broker_pb2_grpc.BrokerStub] = {}
        self._controllers: dict[str, controller_pb2_grpc.ControllerStub] = {}
        self._raw_produce: dict[str, grpc.aio.UnaryUnaryMultiCallable] = {}
        self._raw_fetch: dict[str, grpc.aio.UnaryStreamMultiCallable] = {}
        self._coordinators: dict[str, coordinator_pb2_grpc.GroupCoordinatorStub] = {}

    def channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._make_channel(self._resolve(address))
            self._channels[address] = ch
        return ch

    def _make_channel(self, target: str) -> grpc.aio.Channel:
        """The one place a client channel is created: TLS per the security, and with a token
        source the interceptors adding ``authorization: Bearer <token>`` to every call (a
        client interceptor works on plaintext and TLS channels alike)."""
        interceptors = (
            None if self.token_source is None else bearer_interceptors(self.token_source, target)
        )
        if self._credentials is not None:
            return grpc.aio.secure_channel(
                target, self._credentials, options=self._options, interceptors=interceptors
            )
        return grpc.aio.insecure_channel(target, options=self._options, interceptors=interceptors)

    def _plain_channel(self, target: str) -> grpc.aio.Channel:
        """A channel without the token interceptors (the SCRAM exchange itself)."""
        if self._credentials is not None:
            return grpc.aio.secure_channel(target, self._credentials, options=self._options)
        return grpc.aio.insecure_channel(target, options=self._options)

    def broker(self, address: str) -> broker_pb2_grpc.BrokerStub:
        stub = self._brokers.get(address)
        if stub is None:
            stub = broker_pb2_grpc.BrokerStub(self.channel(address))
            self._brokers[address] = stub
        return stub

    def raw_produce(self, address: str) -> grpc.aio.UnaryUnaryMultiCallable:
        """Broker.Produce taking already-serialised request bytes
        (:mod:`headwater.client.produce_wire`) and returning a ProduceResponse."""
        call = self._raw_produce.get(address)
        if call is None:
            call = self.channel(address).unary_unary(
                _PRODUCE_METHOD,
                request_serializer=None,
                response_deserializer=broker_pb2.ProduceResponse.FromString,
            )
            self._raw_produce[address] = call
        return call

    def raw_fetch(self, address: str) -> grpc.aio.UnaryStreamMultiCallable:
        """Broker.Fetch taking a FetchRequest and yielding
        :class:`~headwater.client.fetch_wire.FetchView` responses whose ``records`` are views
        of the received bytes (:mod:`headwater.client.fetch_wire`)."""
        call = self._raw_fetch.get(address)
        if call is None:
            call = self.channel(address).unary_stream(
                _FETCH_METHOD,
                request_serializer=broker_pb2.FetchRequest.SerializeToString,
                response_deserializer=decode_fetch_response,
            )
            self._raw_fetch[address] = call
        return call

    def coordinator(self, address: str) -> coordinator_pb2_grpc.GroupCoordinatorStub:
        stub = self._coordinators.get(address)
        if stub is None:
            stub = coordinator_pb2_grpc.GroupCoordinatorStub(self.channel(address))
            self._coordinators[address] = stub
        return stub

    def controller(self, address: str) -> controller_pb2_grpc.ControllerStub:
        stub = self._controllers.get(address)
        if stub is None:
            stub = controller_pb2_grpc.ControllerStub(self.channel(address))
            self._controllers[address] = stub
        return stub

    async def close(self) -> None:
        channels = list(self._channels.values())
        self._channels.clear()
        self._brokers.clear()
        self._controllers.clear()
        self._coordinators.clear()
        self._raw_produce.clear()
        self._raw_fetch.clear()
        for ch in channels:
            await ch.close()
