"""Bounded requests: every RPC of every service is size-checked, decoded and shape-checked here,
before any interceptor or handler sees it.

:class:`LimitInterceptor` is the outermost interceptor of every server
(:func:`headwater.platform.server.start_server`). It replaces each method's request deserializer by
the identity, so that gRPC hands over the raw bytes, and then, per request message (once for a
unary request, per message for a client stream):

1. **size** — the message is at most the method's ``max_request_bytes``
   (:meth:`RequestLimits.for_method`): small by default, large only for the methods whose
   payload legitimately is (Produce, the controller-to-broker control plane);
2. **decoding** — with the method's own deserializer (the generated ``FromString`` or a
   hand-written parser such as the broker's Produce view parser); any failure is
   ``INVALID_ARGUMENT`` / ``INVALID_REQUEST`` naming the method and the expected message type,
   never echoing the input (gRPC itself would answer ``UNKNOWN`` with the exception text);
3. **shape** — :func:`check_shape` walks the decoded message along its descriptor: each
   repeated (or map) field has at most ``max_entries`` entries, the whole request at most
   ``max_total_entries``, each string at most ``max_string_chars`` characters (249 for topic
   names, as Kafka). The walk checks a field's length before looking at its entries, so its
   cost is bounded by the limits, not by the input.

A refusal is a :class:`headwater.errors.InvalidRequestError` turned into its status with the
``headwater-error-code`` trailer, and counted in the per-RPC error metric. Messages name the
method, the field path and the limit; they never contain request data.

Handlers still check their own semantic bounds (partitions per CreateTopics, timeouts, ...);
this layer only guarantees that no handler is ever given an unbounded request.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from headwater import errors
from headwater.platform import metrics

T = TypeVar("T")

MIB = 1024 * 1024
#: Entries a handler processes between two turns it gives the event loop (:func:`paced`).
PACE_EVERY = 1000
#: Larger requests are decoded and checked in a worker thread, not on the event loop.
THREAD_DECODE_BYTES = 1 * MIB
#: Kafka's longest topic name.
MAX_TOPIC_CHARS = 249
#: Kafka's STRING type (int16 length): the default bound of any string field.
DEFAULT_MAX_STRING_CHARS = 32_767

#: Names of string fields that hold topic names (bounded by :data:`MAX_TOPIC_CHARS`).
#: ``NewTopic.name`` is left to CreateTopics, which answers per topic (INVALID_TOPIC_EXCEPTION).
TOPIC_FIELD_NAMES = frozenset({"topic", "topics", "topic_name"})

#: Methods whose requests legitimately carry record data (limits: ``bulk``).
BULK_METHODS = frozenset(
    {
        "/headwater.v1.Broker/Produce",
        "/headwater.v1.Broker/ProduceRecords",
    }
)
#: Controller-to-broker and broker-to-broker methods carrying whole-cluster state or many
#: partitions (limits: ``control``); only the cluster itself calls them. (Broker-to-controller
#: AlterPartition fits the default limits: brokers send at most 5 000 items per request.)
CONTROL_METHODS = frozenset(
    {
        "/headwater.v1.Broker/LeaderAndIsr",
        "/headwater.v1.Broker/UpdateMetadata",
        "/headwater.v1.Broker/StopReplica",
        "/headwater.v1.Broker/ReplicaFetch",
        "/headwater.v1.Broker/WriteTxnMarkers",
        "/headwater.v1.Broker/OffsetForLeaderEpoch",
    }
)


@dataclass(frozen=True)
class Limits:
    """One set of bounds for a request message."""

    #: Encoded size of one request message.
    max_request_bytes: int = 4 * MIB
    #: Entries of any one repeated or map field (at any depth).
    max_entries: int = 10_000
    #: Entries of all repeated and map fields of one request together.
    max_total_entries: int = 100_000
    #: Characters of any string field (topic-name fields: at most :data:`MAX_TOPIC_CHARS`).
    max_string_chars: int = DEFAULT_MAX_STRING_CHARS


@dataclass(frozen=True)
class RequestLimits:
    """The bounds of every method of a server: ``default`` for most, ``bulk`` for
    :data:`BULK_METHODS`, ``control`` for :data:`CONTROL_METHODS`."""

    default: Limits = Limits()
    bulk: Limits = Limits(
        max_request_bytes=64 * MIB, max_entries=100_000, max_total_entries=200_000
    )
    control: Limits = Limits(
        max_request_bytes=64 * MIB, max_entries=200_000, max_total_entries=2_000_000
    )

    def for_method(self, method: str) -> Limits:
        """The bounds for ``method`` (``/package.Service/Method``)."""
        if method in BULK_METHODS:
            return self.bulk
        if method in CONTROL_METHODS:
            return self.control
        return self.default

    def largest_request_bytes(self, methods: Iterable[str]) -> int:
        """The largest request any of ``methods`` (``/package.Service/Method``) accepts: the
        server's ``grpc.max_receive_message_length`` (gRPC refuses a larger message itself)."""
        return max(
            (self.for_method(m).max_request_bytes for m in methods),
            default=self.default.max_request_bytes,
        )


DEFAULT_LIMITS = RequestLimits()


# ------------------------------------------------------------------------------ shape check


class _Budget:
    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit


def _string_limit(fd: FieldDescriptor, limits: Limits) -> int:
    if fd.name in TOPIC_FIELD_NAMES:
        return min(MAX_TOPIC_CHARS, limits.max_string_chars)
    return limits.max_string_chars


def _is_map(fd: FieldDescriptor) -> bool:
    mt = fd.message_type
    return mt is not None and mt.GetOptions().map_entry


def _fields(obj: Any, desc: Descriptor) -> Iterable[tuple[FieldDescriptor, Any]]:
    if isinstance(obj, Message):
        return obj.ListFields()  # only the fields that are set
    # a hand-parsed view with the generated class's attribute names
    return [(fd, getattr(obj, fd.name)) for fd in desc.fields if hasattr(obj, fd.name)]


def check_shape(message: Any, desc: Descriptor, limits: Limits, what: str) -> None:
    """Raise :class:`~headwater.errors.InvalidRequestError` when ``message`` (a protobuf
    message of type ``desc``, or a hand-parsed view with the same attribute names) exceeds
    ``limits``. ``what`` names the method in the error. Work done is bounded by the limits."""
    _walk(message, desc, limits, _Budget(limits.max_total_entries), desc.name, what)


def _refuse(what: str, path: str, detail: str) -> errors.InvalidRequestError:
    return errors.InvalidRequestError(f"{what}: {path} {detail}")


def _check_string(value: Any, fd: FieldDescriptor, limits: Limits, path: str, what: str) -> None:
    if fd.type == FieldDescriptor.TYPE_STRING:
        limit = _string_limit(fd, limits)
        if len(value) > limit:
            raise _refuse(what, path, f"is {len(value)} characters long; the limit is {limit}")


def _walk(
    obj: Any, desc: Descriptor, limits: Limits, budget: _Budget, path: str, what: str
) -> None:
    for fd, value in _fields(obj, desc):
        fpath = f"{path}.{fd.name}"
        if fd.is_repeated:
            n = len(value)
            if n > limits.max_entries:
                raise _refuse(what, fpath, f"has {n} entries; the limit is {limits.max_entries}")
            budget.left -= n
            if budget.left < 0:
                raise _refuse(
                    what,
                    fpath,
                    f"brings the request over {budget.limit} entries in all "
                    "(repeated and map fields together)",
                )
            if _is_map(fd):
                key_fd = fd.message_type.fields_by_name["key"]
                value_fd = fd.message_type.fields_by_name["value"]
                for k, v in value.items():
                    _check_string(k, key_fd, limits, f"{fpath}[key]", what)
                    if value_fd.type == FieldDescriptor.TYPE_MESSAGE:
                        _walk(v, value_fd.message_type, limits, budget, f"{fpath}[value]", what)
                    else:
                        _check_string(v, value_fd, limits, f"{fpath}[value]", what)
            elif fd.type == FieldDescriptor.TYPE_MESSAGE:
                for i, item in enumerate(value):
                    _walk(item, fd.message_type, limits, budget, f"{fpath}[{i}]", what)
            elif fd.type == FieldDescriptor.TYPE_STRING:
                for i, item in enumerate(value):
                    _check_string(item, fd, limits, f"{fpath}[{i}]", what)
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            _walk(value, fd.message_type, limits, budget, fpath, what)
        else:
            _check_string(value, fd, limits, fpath, what)


async def paced(items: Iterable[T], every: int = PACE_EVERY) -> AsyncIterator[T]:
    """``items``, giving the event loop a turn every ``every`` items: a handler expanding a
    long repeated field item by item does not hold the loop for the whole request."""
    for i, item in enumerate(items):
        if i and i % every == 0:
            await asyncio.sleep(0)
        yield item


# ------------------------------------------------------------------------------ interceptor

Decoder = Callable[[bytes], Any]


@dataclass(frozen=True)
class _Method:
    path: str
    name: str  # "Service.Method" for messages
    desc: Descriptor
    limits: Limits
    decode: Decoder

    def admit(self, raw: bytes) -> Any:
        """Size, decode and shape-check one request message (raises InvalidRequestError)."""
        if len(raw) > self.limits.max_request_bytes:
            raise errors.InvalidRequestError(
                f"{self.name}: the request is {len(raw)} bytes; "
                f"the limit is {self.limits.max_request_bytes}"
            )
        try:
            message = self.decode(raw)
        except errors.InvalidRequestError:
            raise  # a decoder that checks a limit itself (the broker's Produce parser)
        except Exception:
            raise errors.InvalidRequestError(
                f"{self.name}: the request is not a valid {self.desc.full_name}"
            ) from None
        check_shape(message, self.desc, self.limits, self.name)
        return message

    async def admit_async(self, raw: bytes) -> Any:
        """:meth:`admit`, in a worker thread for a request over :data:`THREAD_DECODE_BYTES`
        (decoding and checking a large message does not hold the event loop). Not for
        :data:`BULK_METHODS`: their size is record data, whose decoding costs next to nothing
        (views or C copies), and their entries are bounded while decoding (the Produce
        parser stops at ``max_entries`` partitions), so the thread hop would only add latency
        to the hot path."""
        if (
            THREAD_DECODE_BYTES < len(raw) <= self.limits.max_request_bytes
            and self.path not in BULK_METHODS
        ):
            return await asyncio.to_thread(self.admit, raw)
        return self.admit(raw)


class LimitInterceptor(grpc.aio.ServerInterceptor):
    """Size, decoding and shape limits of every method (see the module doc). Must be the
    first (outermost) interceptor: the request deserializer it sets is the one gRPC uses."""

    def __init__(self, service: str, limits: RequestLimits = DEFAULT_LIMITS) -> None:
        self._service = service
        self._limits = limits

    def _method(self, path: str, handler: grpc.RpcMethodHandler) -> _Method | None:
        service, _, name = path.lstrip("/").rpartition("/")
        try:
            svc = descriptor_pool.Default().FindServiceByName(service)
        except KeyError:
            return None
        md = svc.methods_by_name.get(name)
        if md is None:
            return None
        decode = handler.request_deserializer
        if decode is None:  # a handler taking raw bytes (none today) checks them itself
            return None
        return _Method(
            path, f"{svc.name}.{name}", md.input_type, self._limits.for_method(path), decode
        )

    async def _refuse(
        self, m: _Method, context: grpc.aio.ServicerContext, exc: BaseException
    ) -> None:
        """Count the refused call and end it with ``exc``'s status (an InvalidRequestError's;
        a bug in the check itself is INTERNAL, logged)."""
        short = m.path.rsplit("/", 1)[-1]
        metrics.REQUESTS.labels(self._service, short).inc()
        code = errors.ErrorCode.Name(errors.code_of(exc))
        metrics.ERRORS.labels(self._service, short, code).inc()
        await metrics.abort_for(context, exc)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        m = self._method(details.method, handler)
        if m is None:
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(m, handler.unary_unary),
                request_deserializer=None,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._unary_stream(m, handler.unary_stream),
                request_deserializer=None,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._stream_unary(m, handler.stream_unary),
                request_deserializer=None,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream_stream(m, handler.stream_stream),
                request_deserializer=None,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _unary(self, m: _Method, inner: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            try:
                request = await m.admit_async(raw)
            except Exception as exc:
                await self._refuse(m, context, exc)
            return await inner(request, context)

        return unary

    def _unary_stream(
        self, m: _Method, inner: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., Any]:
        async def stream(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                request = await m.admit_async(raw)
            except Exception as exc:
                await self._refuse(m, context, exc)
            async for item in inner(request, context):
                yield item

        return stream

    def _stream_unary(self, m: _Method, inner: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def su(raws: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
            gate = _StreamGate(m, raws)
            try:
                return await inner(gate, context)
            except grpc.aio.AbortError:
                raise  # already answered (the error edge inside turned the refusal into it)
            except Exception:
                if gate.refused is None:
                    raise
            await self._refuse(m, context, gate.refused)

        return su

    def _stream_stream(
        self, m: _Method, inner: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., Any]:
        async def ss(
            raws: AsyncIterator[bytes], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            gate = _StreamGate(m, raws)
            try:
                async for item in inner(gate, context):
                    yield item
                if gate.refused is None:
                    return
            except grpc.aio.AbortError:
                raise  # already answered (the error edge inside turned the refusal into it)
            except Exception:
                if gate.refused is None:
                    raise
            await self._refuse(m, context, gate.refused)

        return ss


class _StreamGate:
    """The decoded client stream: each raw message admitted by :meth:`_Method.admit`. The
    first refusal is kept (``refused``) so it is the answer even if the handler catches it."""

    def __init__(self, m: _Method, raws: AsyncIterator[bytes]) -> None:
        self._m = m
        self._source = raws
        # gRPC's receiver generator is made on first use: a handler that refuses the call
        # before reading leaves no never-iterated generator behind (a warning when collected)
        self._raws: AsyncIterator[bytes] | None = None
        self.refused: Exception | None = None

    def __aiter__(self) -> _StreamGate:
        return self

    async def __anext__(self) -> Any:
        if self.refused is not None:
            raise self.refused
        if self._raws is None:
            self._raws = aiter(self._source)
        raw = await anext(self._raws)
        try:
            return await self._m.admit_async(raw)
        except Exception as exc:
            self.refused = exc
            raise


# ------------------------------------------------------------------------------ flags


def add_limit_flags(ap: argparse.ArgumentParser) -> None:
    """The request-limit flags every service takes (docs/configuration.md)."""
    d, b, c = DEFAULT_LIMITS.default, DEFAULT_LIMITS.bulk, DEFAULT_LIMITS.control
    g = ap.add_argument_group("request limits (docs/security.md, hostile input)")
    g.add_argument(
        "--max-request-bytes",
        type=int,
        default=d.max_request_bytes,
        help="largest request message of most RPCs (default %(default)s)",
    )
    g.add_argument(
        "--max-request-entries",
        type=int,
        default=d.max_entries,
        help="most entries in one repeated/map field of a request, most RPCs (default %(default)s)",
    )
    g.add_argument(
        "--max-request-total-entries",
        type=int,
        default=d.max_total_entries,
        help="most entries in all repeated/map fields of one request, most RPCs "
        "(default %(default)s)",
    )
    g.add_argument(
        "--max-request-string-chars",
        type=int,
        default=d.max_string_chars,
        help=f"longest string field of a request; topic names at most {MAX_TOPIC_CHARS} "
        "(default %(default)s)",
    )
    g.add_argument(
        "--max-produce-request-bytes",
        type=int,
        default=b.max_request_bytes,
        help="largest Produce / ProduceRecords request (default %(default)s)",
    )
    g.add_argument(
        "--max-control-request-bytes",
        type=int,
        default=c.max_request_bytes,
        help="largest request of the cluster's internal RPCs: LeaderAndIsr, UpdateMetadata, "
        "StopReplica, ReplicaFetch, WriteTxnMarkers, OffsetForLeaderEpoch (default %(default)s)",
    )
    g.add_argument(
        "--max-control-request-entries",
        type=int,
        default=c.max_entries,
        help="most entries in one repeated field of an internal RPC's request "
        "(default %(default)s)",
    )


def limits_from_args(ns: argparse.Namespace, ap: argparse.ArgumentParser) -> RequestLimits:
    """The :class:`RequestLimits` the flags of :func:`add_limit_flags` describe."""
    values = {
        "--max-request-bytes": ns.max_request_bytes,
        "--max-request-entries": ns.max_request_entries,
        "--max-request-total-entries": ns.max_request_total_entries,
        "--max-request-string-chars": ns.max_request_string_chars,
        "--max-produce-request-bytes": ns.max_produce_request_bytes,
        "--max-control-request-bytes": ns.max_control_request_bytes,
        "--max-control-request-entries": ns.max_control_request_entries,
    }
    for flag, value in values.items():
        if value < 1:
            ap.error(f"{flag} must be at least 1")
    d = Limits(
        max_request_bytes=ns.max_request_bytes,
        max_entries=ns.max_request_entries,
        max_total_entries=ns.max_request_total_entries,
        max_string_chars=ns.max_request_string_chars,
    )
    bulk = replace(
        DEFAULT_LIMITS.bulk,
        max_request_bytes=ns.max_produce_request_bytes,
        max_string_chars=ns.max_request_string_chars,
    )
    control = replace(
        DEFAULT_LIMITS.control,
        max_request_bytes=ns.max_control_request_bytes,
        max_entries=ns.max_control_request_entries,
        max_total_entries=max(
            DEFAULT_LIMITS.control.max_total_entries, ns.max_control_request_entries
        ),
        max_string_chars=ns.max_request_string_chars,
    )
    return RequestLimits(default=d, bulk=bulk, control=control)
