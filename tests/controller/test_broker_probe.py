"""The controller's probe of a broker whose liveness stream broke
(``broker_channels.connection_refused``): only a refused connect is a death."""

from __future__ import annotations

import asyncio
import socket

from services.controller.broker_channels import connection_refused


def test_a_closed_port_is_refused_and_a_listening_one_is_not() -> None:
    async def body() -> None:
        # a port that was just bound and closed: nothing listens there
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed_port = s.getsockname()[1]
        assert await connection_refused("127.0.0.1", closed_port)

        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            assert not await connection_refused("127.0.0.1", port)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(body())


def test_a_listener_that_never_accepts_is_not_refused() -> None:
    """A stopped process (SIGSTOP) keeps its listening socket: the kernel completes the
    handshake from the backlog, so the probe connects and the broker is not declared dead."""

    async def body() -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(8)  # listening, never accept()ed: what a frozen process looks like
            assert not await connection_refused("127.0.0.1", s.getsockname()[1])

    asyncio.run(body())
