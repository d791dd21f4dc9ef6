"""Client side of authentication: where a bearer token comes from, and the channel interceptor
that sends it as ``authorization: Bearer <token>`` on every call.

* :class:`ScramTokenSource` — a user with a password: runs the SCRAM exchange over
  ``Authenticator.Authenticate`` on first use (on a channel of its own, without the
  interceptor) and again when less than a fifth of the token's life is left (or after
  :meth:`invalidate`). The password never leaves the process: only SCRAM proofs are sent.
* :class:`LocalTokenSource` — a service with etcd access mints its own *internal* token with
  the cluster token key (the services' internal identity, docs/security.md): every service
  attaches one to every outgoing call (:func:`attach_service`), whatever the security flags.

Both are shared by every channel of one connection pool and owned by its event loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from headwater import errors
from headwater.rpc.auth import scram, tokens
from headwater.v1 import security_pb2, security_pb2_grpc

AUTHORIZATION_METADATA_KEY = "authorization"
#: Environment variable naming the principal of a service's internal token (optional).
SERVICE_USER_ENV = "HEADWATER_SERVICE_USER"
#: The internal token's user name when ``$HEADWATER_SERVICE_USER`` is not set.
DEFAULT_SERVICE_USER = "headwater-service"
MECHANISMS = {
    "SCRAM-SHA-256": security_pb2.SCRAM_SHA_256,
    "SCRAM-SHA-512": security_pb2.SCRAM_SHA_512,
}


class TokenSource(Protocol):
    async def token(self, target: str) -> str:
        """The current token; ``target`` is the address of the channel needing it (a SCRAM
        source authenticates against it when it needs a new token)."""
        ...


def _refresh_due(expiry_ms: int, issued_ms: int) -> bool:
    remaining = expiry_ms - tokens.now_ms()
    return remaining < max(1, (expiry_ms - issued_ms) // 5)


class ScramTokenSource:
    """Tokens for ``user`` obtained by SCRAM from the service at the target that needs one,
    over ``channel_factory(target)`` (a fresh channel, closed after each exchange)."""

    def __init__(
        self,
        user: str,
        password: str,
        mechanism: str,
        channel_factory: Callable[[str], grpc.aio.Channel],
        *,
        timeout: float = 15.0,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise errors.InvalidConfigError(f"mechanism must be one of {sorted(MECHANISMS)}")
        self._user, self._password, self._mechanism = user, password, mechanism
        self._channel_factory = channel_factory
        self._timeout = timeout
        self._token: str | None = None
        self._expiry = 0
        self._issued = 0
        self._lock = asyncio.Lock()
        self.principal = ""

    def invalidate(self) -> None:
        self._token = None

    async def token(self, target: str) -> str:
        async with self._lock:
            if self._token is None or _refresh_due(self._expiry, self._issued):
                await self._authenticate(target)
            assert self._token is not None
            return self._token

    async def _authenticate(self, target: str) -> None:
        channel = self._channel_factory(target)
        try:
            stub = security_pb2_grpc.AuthenticatorStub(channel)
            try:
                client = scram.ScramClient(self._user, self._password, self._mechanism)
                client_first = client.first_message()
            except scram.ScramError as exc:  # a user name or password SASLprep refuses
                raise errors.SaslAuthenticationFailedError(str(exc)) from None
            queue: asyncio.Queue[security_pb2.AuthenticateRequest | None] = asyncio.Queue()

            async def requests() -> Any:
                while (item := await queue.get()) is not None:
                    yield item

            queue.put_nowait(
                security_pb2.AuthenticateRequest(
                    mechanism=MECHANISMS[self._mechanism], message=client_first
                )
            )
            call = stub.Authenticate(requests(), timeout=self._timeout)
            try:
                first = await call.read()
                if first is grpc.aio.EOF:
                    raise errors.SaslAuthenticationFailedError("the server ended the exchange")
                final = client.final_message(first.message)
                queue.put_nowait(security_pb2.AuthenticateRequest(message=final))
                last = await call.read()
                queue.put_nowait(None)
                if last is grpc.aio.EOF:
                    raise errors.SaslAuthenticationFailedError("the server ended the exchange")
                client.verify_server_final(last.message)
            except grpc.RpcError as exc:
                raise errors.from_rpc_error(exc) from None
            except scram.ScramError as exc:
                raise errors.SaslAuthenticationFailedError(str(exc)) from None
            finally:
                queue.put_nowait(None)
            self._token, self._expiry = last.token, last.token_expiry_ms
            self._issued = tokens.now_ms()
            self.principal = last.principal
        finally:
            await channel.close()


class LocalTokenSource:
    """Tokens for ``user`` minted locally with the cluster token key (``internal``: the
    cluster's own identity, see :mod:`headwater.rpc.auth.tokens`)."""

    def __init__(
        self,
        key: bytes,
        user: str,
        ttl_ms: int = tokens.DEFAULT_TOKEN_TTL_MS,
        *,
        internal: bool = False,
    ) -> None:
        self._key, self._user, self._ttl, self._internal = key, user, ttl_ms, internal
        self._token: str | None = None
        self._expiry = self._issued = 0

    def current(self) -> str:
        """The current token (minted again when a fifth of its life is left)."""
        if self._token is None or _refresh_due(self._expiry, self._issued):
            self._issued = tokens.now_ms()
            self._token, self._expiry = tokens.mint(
                self._key, self._user, ttl_ms=self._ttl, internal=self._internal
            )
        return self._token

    async def token(self, target: str = "") -> str:
        return self.current()


_default_source: TokenSource | None = None


def set_default_token_source(source: TokenSource | None) -> None:
    """The token source of channels created without one in this process (a service's own
    identity: its connection pools, peer and controller channels)."""
    global _default_source
    _default_source = source


def default_token_source() -> TokenSource | None:
    return _default_source


def channel_interceptors(target: str) -> list[grpc.aio.ClientInterceptor] | None:
    """Interceptors for a service's raw channel to ``target`` (None without a default
    source)."""
    source = _default_source
    return None if source is None else bearer_interceptors(source, target)


def service_user() -> str:
    """The principal name of this process's internal token."""
    return os.environ.get(SERVICE_USER_ENV, "").strip() or DEFAULT_SERVICE_USER


async def attach_service(auth: Any, etcd: Any) -> None:
    """Complete a service's :class:`~headwater.rpc.auth.interceptor.ServerAuth` with etcd and
    make every outgoing call of the process carry an internal token (the cluster's own
    identity, minted with the cluster key; principal ``$HEADWATER_SERVICE_USER``, default
    :data:`DEFAULT_SERVICE_USER`). Always: the internal RPCs accept nothing else."""
    await auth.attach(etcd)
    set_default_token_source(LocalTokenSource(auth.token_key, service_user(), internal=True))


def _with_token(details: Any, token: str) -> Any:
    metadata = grpc.aio.Metadata(*(tuple(details.metadata or ())))
    metadata.add(AUTHORIZATION_METADATA_KEY, f"Bearer {token}")
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


class _Bearer:
    def __init__(self, source: TokenSource, target: str) -> None:
        self._source = source
        self._target = target

    async def _details(self, details: Any) -> Any:
        return _with_token(details, await self._source.token(self._target))


class _UU(_Bearer, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(await self._details(details), request)


class _US(_Bearer, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(await self._details(details), request)


class _SU(_Bearer, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(await self._details(details), requests)


class _SS(_Bearer, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(await self._details(details), requests)


def bearer_interceptors(source: TokenSource, target: str) -> list[grpc.aio.ClientInterceptor]:
    """Interceptors for a channel to ``target`` adding the source's token to every call."""
    return [_UU(source, target), _US(source, target), _SU(source, target), _SS(source, target)]
