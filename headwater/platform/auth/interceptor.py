"""Server side enforcement: who is calling (token / certificate / anonymous) and may they.

:class:`ServerAuth` is what ``start_server`` needs to authenticate (the cluster token key) and
to authorize (an :class:`~headwater.platform.auth.acls.Authorizer`, None when ``--authorizer`` is
off). :class:`AuthInterceptor` runs on every call of every Headwater service (health and
reflection pass through):

1. the caller: a present ``authorization: Bearer <token>`` must verify (else
   SASL_AUTHENTICATION_FAILED — never silently anonymous) and names the user; without a token,
   the mTLS certificate principal; else ANONYMOUS. The user is published to the handler through
   :func:`headwater.platform.principal.set_authenticated` (a context variable of the call's task);
2. a caller with an *internal* token (:mod:`headwater.platform.auth.tokens`) is the cluster
   itself: everything is allowed, as for a super user;
3. always, authorizer on or off: an internal method (``Rule.internal``: LeaderAndIsr,
   StopReplica, ReplicaFetch, AlterPartition, ...) refuses every other caller with
   CLUSTER_AUTHORIZATION_FAILED (PERMISSION_DENIED) — unless the authorizer is on and lets
   the caller through step 4 (super user, ClusterAction ACL: Kafka's rule);
4. with the authorizer on, the method's :class:`~headwater.platform.auth.rules.Rule`: every need
   must be allowed (else the resource type's *_AUTHORIZATION_FAILED); per-partition denials
   are answered in-band; list answers are filtered.

It must be installed *inside* the metrics interceptor, which turns the raised errors into
statuses with the ``headwater-error-code`` trailer.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from headwater import errors, timeouts
from headwater.platform import principal
from headwater.platform.auth import rules, tokens
from headwater.platform.auth.acls import Authorizer
from headwater.v1.errors_pb2 import ErrorCode

log = logging.getLogger(__name__)

AUTHORIZATION_METADATA_KEY = "authorization"
#: How long a call waits for the security state (token key, ACLs) after the server started.
READY_TIMEOUT_S = 30.0


class ServerAuth:
    """A service's authentication key, optional authorizer and token lifetime.

    Created before the server starts (``start_server(auth=...)``) and completed by
    :meth:`attach` once etcd is connected; calls arriving before that wait for it (bounded).
    """

    def __init__(
        self, security: Any = None, *, token_ttl_ms: int = tokens.DEFAULT_TOKEN_TTL_MS
    ) -> None:
        #: a :class:`headwater.platform.security_flags.ServerSecurity` (None: no authorizer)
        self.security = security
        self.token_ttl_ms = token_ttl_ms
        self.token_key = b""
        self.etcd: Any = None  # the Authenticator reads SCRAM credentials from it
        self.authorizer: Authorizer | None = None
        if security is not None and security.authorizer:
            self.authorizer = Authorizer(
                super_users=security.super_users,
                allow_everyone_if_no_acl_found=security.allow_everyone_if_no_acl_found,
            )
        self.ready = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None

    async def attach(self, etcd: Any, timeout: float = 30.0) -> None:
        """Load (or create) the cluster token key, start following the ACLs and wait for
        their first load; then calls are served."""
        self.etcd = etcd
        self.token_key = await tokens.load_or_create_key(etcd)
        if self.authorizer is not None and self._watch is None:
            self.authorizer.etcd = etcd
            self._watch = asyncio.create_task(self.authorizer.run(), name="acl-watch")
            await timeouts.wait_for(self.authorizer.loaded.wait(), timeout)
        self.ready.set()

    async def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        if self.ready.is_set():
            return
        try:
            await timeouts.wait_for(self.ready.wait(), timeout)
        except TimeoutError:
            raise errors.RequestTimedOutError(
                "security state not loaded yet (etcd unreachable?)"
            ) from None

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None


async def fail(context: Any, exc: BaseException) -> None:
    """Abort a streaming call the way the metrics interceptor does for unary ones."""
    if isinstance(exc, errors.HeadwaterError):
        context.set_trailing_metadata(errors.to_trailing_metadata(exc))
        await context.abort(exc.grpc_status, str(exc))
    raise exc


def bearer_of(context: Any) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION_METADATA_KEY:
            text = value.decode() if isinstance(value, bytes) else str(value)
            scheme, _, token = text.partition(" ")
            if scheme.lower() != "bearer" or not token:
                raise errors.SaslAuthenticationFailedError("authorization metadata is not Bearer")
            return token.strip()
    return None


def host_of(context: Any) -> str:
    """``ipv4:127.0.0.1:5555`` -> ``127.0.0.1``; ``ipv6:[::1]:5555`` -> ``::1``."""
    peer = context.peer() or ""
    _, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0]
    return host.strip("[]") or "*"


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authentication and authorization of every call (see the module doc)."""

    def __init__(self, auth: ServerAuth) -> None:
        self._auth = auth

    def authenticate(self, context: Any) -> tokens.Identity:
        token = bearer_of(context)
        if token is not None:
            try:
                return tokens.verify_identity(self._auth.token_key, token)
            except tokens.InvalidTokenError as exc:
                raise errors.SaslAuthenticationFailedError(f"invalid token: {exc}") from None
        name = principal.cert_principal_of(context)
        return tokens.Identity(principal.ANONYMOUS if name is None else name)

    def _decide(self, user: str, context: Any) -> rules.Decide:
        authz = self._auth.authorizer
        assert authz is not None
        host = host_of(context)
        return lambda rt, op, name: authz.authorize(user, host, op, rt, name)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(("/grpc.health", "/grpc.reflection")):
            return handler
        rule = rules.rule_for(details.method)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, rule),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._unary_stream(handler.unary_stream, rule),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream(handler.stream_stream, rule),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            inner_su = handler.stream_unary

            async def su(requests: Any, context: grpc.aio.ServicerContext) -> Any:
                await self._admit(rule, None, context)
                return await inner_su(requests, context)

            return grpc.stream_unary_rpc_method_handler(
                su,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    async def _admit(self, rule: rules.Rule, request: Any, context: Any) -> rules.Decide | None:
        """Authenticate, publish the user and check the whole-request needs. Returns the
        decision function (None when the authorizer is off or the method is open)."""
        await self._auth.wait_ready()
        identity = self.authenticate(context)
        user = identity.user
        principal.set_authenticated(user)
        if identity.internal:
            return None  # the cluster itself
        if rule.internal and self._auth.authorizer is None:
            raise errors.ClusterAuthorizationFailedError(
                "only the cluster's own services may call this internal RPC "
                "(docs/security.md, internal identity)"
            )
        if self._auth.authorizer is None or rule.open:
            return None
        decide = self._decide(user, context)
        if f"User:{user}" in self._auth.authorizer.super_users:
            return None
        for need in rule.needs(request):
            if not need.allowed(decide):
                raise need.error()
        return decide

    def _unary(self, inner: Any, rule: rules.Rule) -> Any:
        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            decide = await self._admit(rule, request, context)
            if decide is None:
                return await inner(request, context)
            denied: list[Any] = []
            if rule.inband is not None:
                request, denied = _split(rule.inband, decide, request)
            if denied and not getattr(request, rule.inband.request_field):  # type: ignore[union-attr]
                response = rule.inband.response()  # type: ignore[union-attr]
            else:
                response = await inner(request, context)
            if denied:
                _answer_denied(rule.inband, response, denied)  # type: ignore[arg-type]
            if rule.filter is not None:
                rule.filter(decide, request, response)
            return response

        return unary

    def _unary_stream(self, inner: Any, rule: rules.Rule) -> Any:
        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await self._admit(rule, request, context)
            async for item in inner(request, context):
                yield item

        return stream

    def _stream(self, inner: Any, rule: rules.Rule) -> Any:
        async def stream(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            # the metrics interceptor leaves stream-stream calls alone: translate errors here
            try:
                decide = await self._admit(rule, None, context)
                if decide is not None and rule.first is not None:
                    requests = await _check_first(rule.first, decide, requests)
                async for item in inner(requests, context):
                    yield item
            except errors.HeadwaterError as exc:
                await fail(context, exc)

        return stream


async def _check_first(
    needs: Callable[[Any], Any], decide: rules.Decide, requests: Any
) -> AsyncIterator[Any]:
    """Check the needs of a client stream's first message; the stream, that message again
    first, for the handler."""
    it = aiter(requests)
    try:
        first = await anext(it)
    except StopAsyncIteration:
        first = None
    if first is not None:
        for need in needs(first):
            if not need.allowed(decide):
                raise need.error()

    async def again() -> AsyncIterator[Any]:
        if first is not None:
            yield first
        async for item in it:
            yield item

    return again()


def _split(inband: rules.Inband, decide: rules.Decide, request: Any) -> tuple[Any, list[Any]]:
    items = list(getattr(request, inband.request_field))
    allowed_topics = {t: decide(rules.TOPIC, inband.operation, t) for t in {i.topic for i in items}}
    denied = [i for i in items if not allowed_topics[i.topic]]
    if not denied:
        return request, []
    kept = [i for i in items if allowed_topics[i.topic]]
    if not hasattr(request, "CopyFrom"):
        # a hand-parsed view (Produce: services/broker/handlers/produce_wire.py): plain lists
        trimmed = copy.copy(request)
        setattr(trimmed, inband.request_field, kept)
        return trimmed, denied
    trimmed = type(request)()
    trimmed.CopyFrom(request)
    field = getattr(trimmed, inband.request_field)
    del field[:]
    field.extend(kept)
    return trimmed, denied


def _answer_denied(inband: rules.Inband, response: Any, denied: list[Any]) -> None:
    out = getattr(response, inband.response_field)
    for item in denied:
        entry = out.add()
        entry.topic = item.topic
        entry.partition = item.partition
        entry.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if "error_message" in entry.DESCRIPTOR.fields_by_name:
            entry.error_message = f"not authorized to access topic {item.topic!r}"
