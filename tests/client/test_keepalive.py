"""Idle connections survive the clients' keepalive pings (headwater/platform/server.py).

Clients ping every ``grpc.keepalive_time_ms`` even without calls; a gRPC server refuses pings
without data more often than ``grpc.http2.min_recv_ping_interval_without_data_ms`` (default
5 minutes) and, after two such strikes, closes the connection with GOAWAY ``too_many_pings``,
failing every call on it. The server options must accept the clients' interval.
"""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from headwater.client.grpc_options import channel_options
from headwater.platform.server import server_options


def _opt(options: list[tuple[str, object]], name: str) -> int:
    return int(dict(options)[name])  # type: ignore[call-overload]


def test_servers_accept_pings_at_the_clients_keepalive_interval() -> None:
    client_every = _opt(channel_options(), "grpc.keepalive_time_ms")
    server_min = _opt(server_options(), "grpc.http2.min_recv_ping_interval_without_data_ms")
    assert server_min < client_every
    assert dict(server_options())["grpc.keepalive_permit_without_calls"] == 1


def _scaled(options: list[tuple[str, object]], **ms: int) -> list[tuple[str, object]]:
    """``options`` with the named millisecond settings replaced (dots as double underscores)."""
    repl = {k.replace("__", "."): v for k, v in ms.items()}
    return [(k, repl.get(k, v)) for k, v in options]


async def _idle_connection_state(server_opts: list[tuple[str, object]]) -> grpc.ChannelConnectivity:
    server = grpc.aio.server(options=server_opts)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    # the same ratio as production (client 20 s, server 10 s), 20x faster
    client_opts = _scaled(channel_options(), grpc__keepalive_time_ms=1000)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=client_opts) as ch:
            await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            await asyncio.sleep(5)  # the idle period under test: five client pings
            return ch.get_state()
    finally:
        await server.stop(0)


def test_an_idle_connection_is_not_closed_for_too_many_pings() -> None:
    ours = _scaled(
        server_options(),
        grpc__http2__min_recv_ping_interval_without_data_ms=500,
        grpc__http2__min_ping_interval_without_data_ms=500,
    )
    assert asyncio.run(_idle_connection_state(ours)) == grpc.ChannelConnectivity.READY
    # the control: gRPC's server default (5 minutes) closes the same connection
    default = [o for o in server_options() if "without_data" not in o[0]]
    assert asyncio.run(_idle_connection_state(default)) != grpc.ChannelConnectivity.READY
