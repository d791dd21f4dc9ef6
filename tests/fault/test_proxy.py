"""LinkProxy against a real echo server on 127.0.0.1: open, cut, hang, deaf, heal, moving
target."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.fault.harness.proxy import ProxyHub


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture
def echo() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _addr(srv: _Server) -> tuple[str, int]:
    host, port = srv.server_address[:2]
    return str(host), int(port)


def _connect(port: int, timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def _roundtrip(s: socket.socket, payload: bytes) -> bytes:
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def test_open_forwards_both_ways(echo: _Server) -> None:
    with ProxyHub() as hub:
        p = hub.link("a->b", lambda: _addr(echo))
        with _connect(p.port) as s:
            assert _roundtrip(s, b"hello" * 1000) == b"hello" * 1000


def test_cut_resets_and_refuses_until_healed(echo: _Server) -> None:
    with ProxyHub() as hub:
        p = hub.link("a->b", lambda: _addr(echo))
        s = _connect(p.port)
        assert _roundtrip(s, b"x") == b"x"
        p.cut()
        with pytest.raises(OSError):  # reset (or EOF turned into an error below)
            s.sendall(b"y")
            if not s.recv(10):
                raise ConnectionResetError("closed")
        s.close()
        s2 = _connect(p.port)
        with pytest.raises(OSError):
            s2.sendall(b"z")
            if not s2.recv(10):
                raise ConnectionResetError("closed")
        s2.close()
        p.heal()
        with _connect(p.port) as s3:
            assert _roundtrip(s3, b"back") == b"back"


def test_hang_holds_bytes_without_reset_then_heals(echo: _Server) -> None:
    with ProxyHub() as hub:
        p = hub.link("a->b", lambda: _addr(echo))
        s = _connect(p.port, timeout=0.5)
        assert _roundtrip(s, b"1") == b"1"
        p.hang()
        s.sendall(b"held")
        with pytest.raises(TimeoutError):
            s.recv(10)  # no reply and no reset: a silent partition
        p.heal()
        s.settimeout(5)
        assert s.recv(10) == b"held"  # released by heal, the connection survived
        s.close()


def test_target_resolved_per_connection(echo: _Server) -> None:
    other = _Server(("127.0.0.1", 0), _Echo)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        target = [_addr(echo)]
        with ProxyHub() as hub:
            p = hub.link("a->b", lambda: target[0])
            with _connect(p.port) as s:
                assert _roundtrip(s, b"one") == b"one"
            echo.shutdown()
            target[0] = _addr(other)
            with _connect(p.port) as s:
                assert _roundtrip(s, b"two") == b"two"
            assert p.accepted == 2
    finally:
        other.shutdown()
        other.server_close()


def test_deaf_forwards_requests_and_drops_answers(echo: _Server) -> None:
    with ProxyHub() as hub:
        p = hub.link("a->b", lambda: _addr(echo))
        s = _connect(p.port, timeout=0.5)
        assert _roundtrip(s, b"1") == b"1"
        p.deafen()
        s.sendall(b"lost-answer")
        with pytest.raises(TimeoutError):
            s.recv(10)  # the echo server got it and answered; the answer was dropped
        deadline = time.monotonic() + 5
        while p.dropped < len(b"lost-answer") and time.monotonic() < deadline:
            s.settimeout(0.05)
            with contextlib.suppress(TimeoutError):
                s.recv(10)
        assert p.dropped == len(b"lost-answer")
        p.heal()
        s.settimeout(5)
        assert _roundtrip(s, b"again") == b"again"  # same connection, answers flow again
        s.close()
