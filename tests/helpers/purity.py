"""The fast tier's promise, enforced: a test marked ``fast`` starts no process, opens no network
connection, and serves nothing.

``make test-fast`` runs ``pytest -m fast``: the pure-logic tests a developer runs on every change
(under a minute). So that the marker cannot drift from the truth, every test carrying it runs
with the calls below replaced by ones that fail the test with :class:`ImpureFastTest` — in
``make test-fast`` and in ``make test`` alike. In-process asyncio (its self-pipe is a
``socketpair``) and AF_UNIX sockets stay allowed; what is refused is what reaches outside the
process: a child process, or a TCP/UDP socket bound or connected, or a gRPC server or channel.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest


class ImpureFastTest(AssertionError):
    """A test marked ``fast`` did what the fast tier excludes (named in the message)."""


def _fail(message: str) -> ImpureFastTest:
    """The error to raise; with HEADWATER_TEST_PURITY_LOG set, also appended to that file with
    the test's id (how the tier's members are found: tests may catch the error and retry)."""
    log = os.environ.get("HEADWATER_TEST_PURITY_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}\t{message}\n")
    return ImpureFastTest(message)


def _refuse(what: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise _fail(
            f"a test marked `fast` {what}: it belongs to the process-level tier "
            "(remove its `fast` mark)"
        )

    return refused


def _guard_socket(method: str) -> Callable[..., Any]:
    original = getattr(socket.socket, method)

    def guarded(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise _fail(
                f"a test marked `fast` called socket.{method}{args!r}: it belongs to the "
                "process-level tier (remove its `fast` mark)"
            )
        return original(self, *args, **kwargs)

    return guarded


@contextmanager
def pure(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Within the block, starting a process, using the network or gRPC fails the test."""
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("started a process"))
    monkeypatch.setattr(os, "fork", _refuse("forked"))
    monkeypatch.setattr(os, "posix_spawn", _refuse("spawned a process"))
    monkeypatch.setattr(asyncio, "create_subprocess_exec", _refuse("started a process (asyncio)"))
    for method in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, method, _guard_socket(method))
    try:
        import grpc
        import grpc.aio
    except ImportError:  # pragma: no cover - grpc is a core dependency
        pass
    else:
        for module, names in (
            (grpc, ("server", "insecure_channel", "secure_channel")),
            (grpc.aio, ("server", "insecure_channel", "secure_channel")),
        ):
            for name in names:
                monkeypatch.setattr(module, name, _refuse(f"used grpc.{name}"))
    yield
