"""Per-RPC Prometheus metrics and the error edge of every server.

Metric names follow Prometheus conventions (``_total`` counters, ``_seconds`` histograms,
base units). Each service process has one default registry, exposed over HTTP by
:func:`start_http`, which also answers :data:`READY_PATH` with the process's readiness (200 or
503: the gRPC health's overall status, for a probe that cannot speak the gRPC port's TLS).

The interceptor wraps every handler (unary, server-, client- and bidirectional-streaming):

* counts requests and errors, and observes latency, labelled by service and method;
* turns a :class:`~headwater.errors.HeadwaterError` raised by a handler into the error's gRPC
  status plus the ``headwater-error-code`` trailer; any other exception becomes INTERNAL
  with ``UNKNOWN_SERVER_ERROR`` (and is logged with its traceback).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import grpc
import prometheus_client as prom

from headwater import errors

log = logging.getLogger(__name__)

REQUESTS = prom.Counter("headwater_rpc_requests_total", "RPCs received", ["service", "method"])
ERRORS = prom.Counter(
    "headwater_rpc_errors_total", "RPCs that failed", ["service", "method", "code"]
)
LATENCY = prom.Histogram(
    "headwater_rpc_duration_seconds",
    "Time from request to response (to the end of the stream for streaming RPCs)",
    ["service", "method"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)


#: the plain-HTTP readiness path of the metrics port (200 ready, 503 not)
READY_PATH = "/ready"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes are not logged."""


def start_http(host: str, port: int, ready: Callable[[], bool] = lambda: True) -> int:
    """Serve the metrics on ``host:port`` (0 = any free port) from a daemon thread, and
    :data:`READY_PATH`: 200 while ``ready()`` (called on that thread: it must only read a
    flag), else 503. Returns the bound port."""
    metrics_app = prom.make_wsgi_app()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != READY_PATH:
            return list(metrics_app(environ, start_response))
        ok = ready()
        start_response(
            "200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")]
        )
        return [b"ready\n" if ok else b"not ready\n"]

    class Server(prom.exposition.ThreadingWSGIServer):
        address_family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)[0][0]

    httpd = make_server(host, port, app, Server, handler_class=_QuietHandler)
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return int(httpd.server_port)


async def abort_for(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    """End the call with ``exc``'s status: a HeadwaterError's own with its trailer; anything
    else INTERNAL / ``UNKNOWN_SERVER_ERROR``, logged with its traceback."""
    if isinstance(exc, errors.HeadwaterError):
        context.set_trailing_metadata(errors.to_trailing_metadata(exc))
        await context.abort(exc.grpc_status, str(exc))
    log.exception("unexpected error in handler", exc_info=exc)
    context.set_trailing_metadata(
        ((errors.ERROR_CODE_METADATA_KEY, str(errors.UnknownServerError.code)),)
    )
    await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")


@contextlib.asynccontextmanager
async def _edge(
    service: str, method: str, context: grpc.aio.ServicerContext
) -> AsyncIterator[None]:
    """Count and time one call; turn what the body raises into its status (:func:`abort_for`)."""
    REQUESTS.labels(service, method).inc()
    start = time.perf_counter()
    try:
        yield
    except grpc.aio.AbortError:
        ERRORS.labels(service, method, "ABORTED").inc()
        raise
    except Exception as exc:
        ERRORS.labels(service, method, _code_name(exc)).inc()
        await abort_for(context, exc)
    finally:
        LATENCY.labels(service, method).observe(time.perf_counter() - start)


class ServerInterceptor(grpc.aio.ServerInterceptor):
    """Metrics and error translation for every handler of one service process."""

    def __init__(self, service: str) -> None:
        self._service = service

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method.rsplit("/", 1)[-1]
        if details.method.startswith(("/grpc.health", "/grpc.reflection")):
            return handler
        service = self._service
        codecs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                async with _edge(service, method, context):
                    return await inner_uu(request, context)

            return grpc.unary_unary_rpc_method_handler(unary, **codecs)
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                async with _edge(service, method, context):
                    async for item in inner_us(request, context):
                        yield item

            return grpc.unary_stream_rpc_method_handler(stream, **codecs)
        if handler.stream_stream is not None:
            inner_ss = handler.stream_stream

            async def bidi(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                async with _edge(service, method, context):
                    async for item in inner_ss(requests, context):
                        yield item

            return grpc.stream_stream_rpc_method_handler(bidi, **codecs)
        if handler.stream_unary is not None:
            inner_su = handler.stream_unary

            async def upload(requests: Any, context: grpc.aio.ServicerContext) -> Any:
                async with _edge(service, method, context):
                    return await inner_su(requests, context)

            return grpc.stream_unary_rpc_method_handler(upload, **codecs)
        return handler


def _code_name(exc: BaseException) -> str:
    return errors.ErrorCode.Name(errors.code_of(exc))
