"""Calling every RPC of every Headwater service with generated requests, and judging answers.

The RPC list is read from the generated service descriptors (``headwater/v1/*_pb2``), so a
new RPC is fuzzed without editing this file. Calls are made through generic channel methods
(``channel.unary_unary(path, ...)`` etc.) with a per-call deadline.

An answer is acceptable when it is:

* a response (an in-band ``error_code`` is fine; for streams, up to :data:`STREAM_READS`
  responses are read and the call is cancelled), or
* a gRPC status carrying the ``headwater-error-code`` trailer with a code other than
  ``UNKNOWN_SERVER_ERROR`` (a typed HeadwaterError), or
* a gRPC-level refusal without trailer: INVALID_ARGUMENT, RESOURCE_EXHAUSTED, OUT_OF_RANGE,
  FAILED_PRECONDITION, UNIMPLEMENTED (a service process not serving that service).

Not acceptable: UNKNOWN, INTERNAL without a typed trailer, ``UNKNOWN_SERVER_ERROR`` (the
error edge's code for an unhandled exception), and DEADLINE_EXCEEDED (a hang) — except for
the long-poll RPCs in :data:`LONG_POLL`, which may legitimately wait past the deadline for
data or other group members; their liveness is covered by the health checks.
"""

from __future__ import annotations

import importlib
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.client.grpc_options import channel_options
from headwater.errors import ERROR_CODE_METADATA_KEY
from headwater.v1 import (
    broker_pb2,
    controller_pb2,
    coordinator_pb2,
    group_stream_pb2,
    security_pb2,
    transaction_pb2,
)
from headwater.v1.errors_pb2 import ErrorCode

#: Every service of the public API and the process kinds that serve it.
SERVICES: dict[str, tuple[ServiceDescriptor, tuple[str, ...]]] = {
    "Broker": (broker_pb2.DESCRIPTOR.services_by_name["Broker"], ("broker",)),
    "Controller": (controller_pb2.DESCRIPTOR.services_by_name["Controller"], ("controller",)),
    "GroupCoordinator": (
        coordinator_pb2.DESCRIPTOR.services_by_name["GroupCoordinator"],
        ("coordinator",),
    ),
    "TransactionCoordinator": (
        transaction_pb2.DESCRIPTOR.services_by_name["TransactionCoordinator"],
        ("coordinator",),
    ),
    "GroupStreamService": (
        group_stream_pb2.DESCRIPTOR.services_by_name["GroupStreamService"],
        ("broker",),
    ),
    # served by whichever processes register it; UNIMPLEMENTED elsewhere is acceptable
    "Authenticator": (
        security_pb2.DESCRIPTOR.services_by_name["Authenticator"],
        ("broker", "controller", "coordinator"),
    ),
}

#: RPCs that wait for data or for other group members by design (long polls; the group
#: stream waits for its assignment and then for records).
LONG_POLL = frozenset(
    {"Broker.Fetch", "Broker.FetchRecords", "Broker.ReplicaFetch", "GroupCoordinator.JoinGroup",
     "GroupCoordinator.SyncGroup", "GroupStreamService.Consume"}
)  # fmt: skip

#: Control-plane RPCs that can change cluster state (assignments, epochs, topics, groups):
#: fuzzed last, against the dedicated fuzz cluster only.
DESTRUCTIVE = frozenset(
    {"Broker.LeaderAndIsr", "Broker.UpdateMetadata", "Broker.StopReplica",
     "Broker.WriteTxnMarkers", "GroupCoordinator.WriteTxnOffsetMarker",
     "Controller.DeleteTopics", "Controller.ControlledShutdown", "Controller.AlterPartition",
     "Controller.ElectLeaders", "Controller.AlterPartitionReassignments",
     "Controller.AlterConfigs", "Controller.AlterTopicConfigs", "Controller.CreateAcls",
     "Controller.DeleteAcls", "Controller.AlterUserScramCredentials",
     "GroupCoordinator.DeleteGroups"}
)  # fmt: skip

ACCEPTED_STATUSES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
STREAM_READS = 3
CALL_DEADLINE = 10.0
#: Long polls get a short deadline: reaching it is expected, and it bounds the budget used.
LONG_POLL_DEADLINE = 2.0


@dataclass(frozen=True)
class Rpc:
    """One RPC: ``"Service.Method"``, its descriptor and the process kinds serving it."""

    name: str
    method: MethodDescriptor
    kinds: tuple[str, ...]

    @property
    def path(self) -> str:
        return f"/{self.method.containing_service.full_name}/{self.method.name}"

    @property
    def destructive(self) -> bool:
        return self.name in DESTRUCTIVE


def all_rpcs() -> list[Rpc]:
    """Every RPC of every service, non-destructive ones first (descriptor order within)."""
    rpcs = [
        Rpc(f"{svc}.{m.name}", m, kinds)
        for svc, (desc, kinds) in SERVICES.items()
        for m in desc.methods
    ]
    return sorted(rpcs, key=lambda r: r.destructive)


def descriptor_rpc_names() -> set[str]:
    """``"Service.Method"`` of every service in every generated module of headwater/v1
    (independent of :data:`SERVICES`: what the tests compare the fuzzed list with)."""
    v1 = Path(__file__).resolve().parents[2] / "headwater" / "v1"
    mods = [importlib.import_module(f"headwater.v1.{p.stem}") for p in v1.glob("*_pb2.py")]
    return {
        f"{svc.name}.{m.name}"
        for mod in mods
        for svc in mod.DESCRIPTOR.services_by_name.values()
        for m in svc.methods
    }


@dataclass
class Outcome:
    """How one call ended: ``kind`` is "ok", "typed", "status" or "bad"."""

    kind: str
    detail: str


def _judge(rpc: Rpc, err: grpc.RpcError) -> Outcome:
    status = err.code()
    wire = None
    for key, value in err.trailing_metadata() or ():
        if key == ERROR_CODE_METADATA_KEY:
            wire = int(value)
    if wire is not None and wire != ErrorCode.UNKNOWN_SERVER_ERROR:
        return Outcome("typed", ErrorCode.Name(wire))
    if status in ACCEPTED_STATUSES and wire is None:
        return Outcome("status", status.name)
    if status == grpc.StatusCode.DEADLINE_EXCEEDED and rpc.name in LONG_POLL:
        return Outcome("status", "DEADLINE_EXCEEDED (long poll)")
    return Outcome("bad", f"{status.name} trailer={wire} details={err.details()!r}")


def _requests_then_hold(items: list[Any], done: threading.Event) -> Iterator[Any]:
    yield from items
    done.wait(CALL_DEADLINE)  # keep the request side open while responses are read


def _serialize(message: Any) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


def call(channel: grpc.Channel, rpc: Rpc, request: Any) -> Outcome:
    """Send ``request`` (a list of requests for client-streaming RPCs) and judge the answer.
    A request is a message, or bytes sent as they are (hostile wire input)."""
    out_cls = message_factory.GetMessageClass(rpc.method.output_type)
    ser, de = _serialize, out_cls.FromString
    m = rpc.method
    timeout = LONG_POLL_DEADLINE if rpc.name in LONG_POLL else CALL_DEADLINE
    try:
        if m.client_streaming:
            done = threading.Event()
            fn = channel.stream_stream(rpc.path, request_serializer=ser, response_deserializer=de)
            stream = fn(_requests_then_hold(list(request), done), timeout=timeout)
            try:
                return _read_some(stream)
            finally:
                done.set()
                stream.cancel()
        if m.server_streaming:
            fn2 = channel.unary_stream(rpc.path, request_serializer=ser, response_deserializer=de)
            stream = fn2(request, timeout=timeout)
            try:
                return _read_some(stream)
            finally:
                stream.cancel()
        fn3 = channel.unary_unary(rpc.path, request_serializer=ser, response_deserializer=de)
        fn3(request, timeout=timeout)
        return Outcome("ok", "response")
    except grpc.RpcError as err:
        return _judge(rpc, err)


def _read_some(stream: Any) -> Outcome:
    for n, _resp in enumerate(stream, 1):
        if n >= STREAM_READS:
            break
    return Outcome("ok", "stream")


def healthy(address: str, timeout: float = 5.0) -> bool:
    """grpc.health.v1 says SERVING for the whole server."""
    with grpc.insecure_channel(address) as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout
            )
        except grpc.RpcError:
            return False
    return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)


@dataclass
class Tally:
    """Counts per RPC and outcome, and the bad answers (with their request, abridged)."""

    calls: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    bad: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def record(self, rpc: Rpc, address: str, request: Any, outcome: Outcome) -> None:
        self.calls[rpc.name] += 1
        self.outcomes[(rpc.name, outcome.kind if outcome.kind != "typed" else outcome.detail)] += 1
        if outcome.kind == "bad":
            text = str(request)
            if len(text) > 600:
                text = text[:600] + f"... ({len(text)} chars)"
            self.bad.append(f"{rpc.name} @ {address}: {outcome.detail}\n  request: {text}")


def open_channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=channel_options())


def run_queue_with_timeout(fn: Any, timeout: float) -> Any:
    """Run ``fn()`` in a thread; return its result or raise TimeoutError (a client-side hang
    guard on top of gRPC deadlines)."""
    q: queue.Queue[tuple[bool, Any]] = queue.Queue()

    def target() -> None:
        try:
            q.put((True, fn()))
        except BaseException as exc:
            q.put((False, exc))

    threading.Thread(target=target, daemon=True).start()
    start = time.monotonic()
    try:
        ok, value = q.get(timeout=timeout)
    except queue.Empty:
        raise TimeoutError(f"call did not return within {time.monotonic() - start:.1f}s") from None
    if not ok:
        raise value
    return value
