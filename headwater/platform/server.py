"""Building and running a Headwater gRPC service: health, reflection, metrics, shutdown.

Every service (broker, controller, coordinator) is started through :func:`start_server`, so
each one has, without code of its own:

* ``grpc.health.v1.Health``: the overall status "" and one per service name (readiness:
  SERVING once the process can take requests; NOT_SERVING while it stops, and for a broker
  until it has the cluster's metadata), and :data:`LIVENESS` (SERVING from the start: the
  process is up; the chart's startup and liveness probes ask it, so a broker waiting for a
  controller is not restarted); the metrics port's ``/ready`` answers the overall status over
  plain HTTP (200/503) for probes that cannot speak the port's TLS,
* server reflection, ``grpc.reflection.v1`` and ``v1alpha`` (``grpcurl -plaintext HOST:PORT
  list`` works; :mod:`headwater.platform.reflection`),
* a Prometheus endpoint (``/metrics``) with request counts, errors and latency per RPC
  (:mod:`headwater.platform.metrics`),
* request limits (:mod:`headwater.platform.limits`, the outermost interceptor): each method's
  request is size-checked, decoded and shape-checked (entries per repeated field, string
  lengths) before any other interceptor or handler sees it; gRPC's own receive limit is the
  largest request any registered method accepts, so a larger message is refused by gRPC
  before it is buffered,
* two-stage shutdown: stop accepting, let in-flight calls finish for ``grace`` seconds,
* TLS / mTLS when given a :class:`headwater.platform.security_flags.ServerSecurity` with a
  certificate (the port then speaks TLS only; the metrics endpoint stays plain HTTP), and the
  certificate-subject principal mapping (:mod:`headwater.platform.principal`).

Handlers raise :class:`headwater.errors.HeadwaterError` for whole-request failures; the
interceptor in :mod:`headwater.platform.metrics` turns them into a gRPC status with the
``headwater-error-code`` trailer (the only place that does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from headwater.client.grpc_options import DEFAULT_MAX_MESSAGE_BYTES, channel_options
from headwater.platform import limits as request_limits
from headwater.platform import metrics, principal, reflection
from headwater.platform.auth import authenticator
from headwater.platform.auth.interceptor import AuthInterceptor, ServerAuth
from headwater.platform.security_flags import ServerSecurity

log = logging.getLogger(__name__)

#: the health service name that reports SERVING as soon as the server runs (liveness), whatever
#: the overall status "" (readiness) says
LIVENESS = "liveness"


def server_options(
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, max_receive_bytes: int | None = None
) -> list[tuple[str, Any]]:
    """:func:`channel_options` plus the server's side of keepalive: clients ping every 20 s
    even when idle, and gRPC's server default refuses pings without data more often than every
    5 minutes (after two such "strikes" it closes the connection with ``too_many_pings``,
    failing the calls on it). Accept one every 10 s. ``max_receive_bytes`` (default
    ``max_message_bytes``) bounds one received message."""
    options = [
        (k, max_receive_bytes)
        if k == "grpc.max_receive_message_length" and max_receive_bytes is not None
        else (k, v)
        for k, v in channel_options(max_message_bytes)
    ]
    return [
        *options,
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ]


@dataclass
class RunningServer:
    """A started server: its bound port, health servicer and metrics port."""

    server: grpc.aio.Server
    port: int
    health: health.HealthServicer
    metrics_port: int
    service_names: Sequence[str]
    auth: ServerAuth | None = None
    #: the overall health status is SERVING (what the metrics port's /ready answers)
    ready: bool = False

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self.service_names):
            await self.health.set(name, status)  # the aio servicer's set is a coroutine
        self.ready = serving

    async def stop(self, grace: float = 2.0) -> None:
        await self.set_serving(False)
        await self.server.stop(grace)
        if self.auth is not None:
            await self.auth.stop()


class _Registrations:
    """Stands in for the server while the servicers register, so that the server's receive
    limit can be chosen from the methods they add; :meth:`replay` adds them to the server."""

    def __init__(self) -> None:
        self._calls: list[tuple[str, tuple[Any, ...]]] = []
        self.methods: list[str] = []  # "/package.Service/Method"

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self._calls.append(("add_generic_rpc_handlers", (handlers,)))

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self._calls.append(("add_registered_method_handlers", (service, handlers)))
        self.methods += [f"/{service}/{name}" for name in handlers]

    def replay(self, server: grpc.aio.Server) -> None:
        for name, args in self._calls:
            getattr(server, name)(*args)


async def start_server(
    *,
    host: str,
    port: int,
    register: Sequence[Callable[[grpc.aio.Server], str]],
    service: str,
    metrics_port: int | None = 0,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    security: ServerSecurity | None = None,
    auth: ServerAuth | None = None,
    limits: request_limits.RequestLimits = request_limits.DEFAULT_LIMITS,
    serving: bool = True,
) -> RunningServer:
    """Create, register and start a server on ``host:port`` (0 picks a free port).

    ``register`` callables add one servicer each and return its full service name (e.g.
    ``"headwater.v1.Broker"``), which is published for health and reflection.
    ``service`` names the process in metrics ("broker", "controller", ...).
    ``metrics_port`` None disables the Prometheus endpoint; 0 picks a free port.
    ``security`` None or without a certificate: plaintext; else TLS (mTLS per its client_auth).
    ``auth`` (:class:`headwater.platform.auth.interceptor.ServerAuth`, attached to etcd before or
    after the start): serve the Authenticator, verify bearer tokens and, with its authorizer,
    enforce ACLs on every call.
    ``limits``: the request limits of every method (:mod:`headwater.platform.limits`).
    ``serving``: health reports SERVING once started; False leaves it NOT_SERVING until the
    caller's :meth:`RunningServer.set_serving` (a broker: once it has the cluster's metadata).
    :data:`LIVENESS` reports SERVING once started either way.
    """
    interceptors: list[grpc.aio.ServerInterceptor] = [
        request_limits.LimitInterceptor(service, limits),  # first: it decodes every request
        metrics.ServerInterceptor(service),
    ]
    if auth is not None:
        interceptors.append(AuthInterceptor(auth))  # inside metrics: its errors get trailers
        register = [*register, authenticator.register(auth)]
    collected = _Registrations()
    names = [reg(collected) for reg in register]
    server = grpc.aio.server(
        interceptors=interceptors,
        options=server_options(max_message_bytes, limits.largest_request_bytes(collected.methods)),
    )
    collected.replay(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable([*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name], server)
    credentials = security.server_credentials() if security is not None else None
    if security is not None:
        principal.set_mapper(security.mapper)
    if credentials is not None:
        bound = server.add_secure_port(f"{host}:{port}", credentials)
    else:
        bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind {host}:{port}")
    await server.start()
    running = RunningServer(server, bound, health_servicer, -1, names, auth)
    if metrics_port is not None:
        running.metrics_port = metrics.start_http(host, metrics_port, lambda: running.ready)
    await health_servicer.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
    await running.set_serving(serving)
    mport = running.metrics_port
    mode = "plaintext"
    if credentials is not None and security is not None:
        mode = f"TLS, client auth {security.client_auth}"
    log.info("%s listening on %s:%d (%s; metrics %s)", service, host, bound, mode, mport)
    return running
