"""Client side of authentication: where a bearer token comes from, and the channel interceptor
that sends it as ``authorization: Bearer <token>`` on every call.

* :class:`ScramTokenSource` — a user with a password: runs the SCRAM exchange over
  ``Authenticator.Authenticate`` on first use (on a channel of its own, without the
  interceptor) and again when less than a fifth of the token's life is left (or after
  :meth:`invalidate`). The password never leaves the process: only SCRAM proofs are sent.
* a service's own source of *internal* tokens (minted with the cluster token key; the
  services' internal identity, docs/security.md) is on the server side:
  :class:`headwater.platform.auth.service.LocalTokenSource`, installed as this module's
  default source by :func:`headwater.platform.auth.service.attach_service`.

A source is shared by every channel of one connection pool and owned by its event loop.
This module is part of the client library: it imports nothing of the server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from headwater import errors, scram
from headwater.v1 import security_pb2, security_pb2_grpc

AUTHORIZATION_METADATA_KEY = "authorization"
MECHANISMS = {
    "SCRAM-SHA-256": security_pb2.SCRAM_SHA_256,
    "SCRAM-SHA-512": security_pb2.SCRAM_SHA_512,
}


class TokenSource(Protocol):
    async def token(self, target: str) -> str:
        """The current token; ``target`` is the address of the channel needing it (a SCRAM
        source authenticates against it when it needs a new token)."""
        ...


def _now_ms() -> int:
    return int(time.time() * 1000)


def refresh_due(expiry_ms: int, issued_ms: int) -> bool:
    """Whether a token valid until ``expiry_ms`` and issued at ``issued_ms`` is to be renewed
    (less than a fifth of its life left)."""
    remaining = expiry_ms - _now_ms()
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
            if self._token is None or refresh_due(self._expiry, self._issued):
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
            self._issued = _now_ms()
            self.principal = last.principal
        finally:
            await channel.close()


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
