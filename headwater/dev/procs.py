"""Child processes of the local cluster: start with logs to a file, stop by PID.

Every process is started in its own session (``start_new_session``) so a Ctrl-C in the
terminal reaches only the parent, which then stops the children in order.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class StartupError(RuntimeError):
    """A child process did not become ready before its deadline (or exited)."""


@dataclass
class ChildProcess:
    """One child process, its command line and its log file."""

    name: str
    argv: list[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                env=dict(self.env) if self.env is not None else None,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL now and reap (a crash, for fault tests)."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    watch: Sequence[ChildProcess] = (),
) -> None:
    """Poll ``predicate`` until true; StartupError after ``timeout`` or if a watched child
    exits."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        for child in watch:
            if not child.alive():
                raise StartupError(
                    f"{child.name} exited (code {child.proc.returncode if child.proc else None})"
                    f" while waiting for {what}; log {child.log_path}:\n{child.log_tail()}"
                )
        if time.monotonic() >= deadline:
            tails = "".join(f"\n--- {c.name} ({c.log_path}):\n{c.log_tail()}" for c in watch)
            raise StartupError(f"timed out after {timeout:.0f}s waiting for {what}{tails}")
        time.sleep(interval)


def python_env() -> dict[str, str]:
    """Environment for Python children: unbuffered output, the repo on PYTHONPATH, and the
    malloc tunables from PERFORMANCE-NOTES (big-message gRPC services)."""
    env = dict(os.environ)
    # a client-side default (headwater.client.security) must not leak into services
    env.pop("HEADWATER_SECURITY_CONFIG", None)
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault(
        "GLIBC_TUNABLES",
        "glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=536870912"
        ":glibc.malloc.arena_max=2",
    )
    return env
