"""The ``headwater.v1.Authenticator`` servicer: one SCRAM exchange per stream -> a bearer token.

Stream: client-first (with the mechanism) -> server-first -> client-final -> server-final with
the token, its expiry and the principal. Any failure (unknown user, wrong password, malformed
message, unsupported mechanism, stream ended early) ends the stream with
SASL_AUTHENTICATION_FAILED (UNSUPPORTED_SASL_MECHANISM for a mechanism that is not SCRAM-SHA-256
or -512) — the same answer for an unknown user and a wrong password.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from headwater import errors, scram, timeouts
from headwater.platform.auth import credentials, tokens
from headwater.platform.auth.interceptor import ServerAuth
from headwater.v1 import security_pb2, security_pb2_grpc

log = logging.getLogger(__name__)

MECHANISM_NAMES = {
    security_pb2.SCRAM_SHA_256: "SCRAM-SHA-256",
    security_pb2.SCRAM_SHA_512: "SCRAM-SHA-512",
}
#: Time a client has for the whole exchange.
EXCHANGE_TIMEOUT_S = 30.0


class AuthenticatorService(security_pb2_grpc.AuthenticatorServicer):
    def __init__(self, auth: ServerAuth) -> None:
        self._auth = auth

    async def Authenticate(
        self,
        request_iterator: AsyncIterator[security_pb2.AuthenticateRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[security_pb2.AuthenticateResponse]:
        it = aiter(request_iterator)

        async def next_message() -> security_pb2.AuthenticateRequest:
            try:
                return await timeouts.wait_for(anext(it), EXCHANGE_TIMEOUT_S)
            except (StopAsyncIteration, TimeoutError):
                raise errors.IllegalSaslStateError("the SCRAM exchange ended early") from None

        first = await next_message()
        mechanism = MECHANISM_NAMES.get(first.mechanism)
        if mechanism is None:
            raise errors.UnsupportedSaslMechanismError(
                "supported mechanisms: SCRAM-SHA-256, SCRAM-SHA-512"
            )
        server = scram.ScramServer(mechanism, fake_salt_key=self._auth.token_key)
        try:
            user = server.receive_client_first(first.message)
            cred = await credentials.lookup(self._auth.etcd, user, mechanism)
            yield security_pb2.AuthenticateResponse(message=server.server_first(cred))
            final = await next_message()
            server_final = server.receive_client_final(final.message)
        except scram.ScramError as exc:
            log.info("authentication failed (%s): %s", mechanism, exc)
            raise errors.SaslAuthenticationFailedError(
                f"authentication failed ({mechanism})"
            ) from None
        token, expiry = tokens.mint(self._auth.token_key, user, ttl_ms=self._auth.token_ttl_ms)
        yield security_pb2.AuthenticateResponse(
            message=server_final,
            token=token,
            token_expiry_ms=expiry,
            principal=f"User:{user}",
        )


def register(auth: ServerAuth) -> Callable[[grpc.aio.Server], str]:
    """A ``start_server`` register callable for the Authenticator service."""

    def reg(server: Any) -> str:
        security_pb2_grpc.add_AuthenticatorServicer_to_server(AuthenticatorService(auth), server)
        return security_pb2.DESCRIPTOR.services_by_name["Authenticator"].full_name

    return reg
