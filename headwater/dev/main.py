"""``headwater dev``: run a whole local cluster until Ctrl-C or SIGTERM.

Prints, each on a line of its own and flushed::

    bootstrap: 127.0.0.1:PORT
    metrics: controller-1 http://127.0.0.1:PORT/metrics   (one line per process)
    metrics: broker-1 http://127.0.0.1:PORT/metrics
    metrics: coordinator-1 http://127.0.0.1:PORT/metrics
    controllers: 127.0.0.1:PORT,127.0.0.1:PORT
    coordinators: 127.0.0.1:PORT,127.0.0.1:PORT
    logs: /abs/path/data/logs

With ``--tls`` every endpoint (etcd included) is TLS with client certificates required (mTLS),
signed by a CA kept in ``<data-dir>/tls``; the client's files are printed and written to
``<data-dir>/tls/client.json`` (``{"ca_file", "cert_file", "key_file"}``: the keyword arguments of
:class:`headwater.client.security.ClientSecurity`)::

    tls-ca: /abs/path/data/tls/ca.pem
    tls-cert: /abs/path/data/tls/client.pem
    tls-key: /abs/path/data/tls/client.key
    tls-client-config: /abs/path/data/tls/client.json

Defaults: 3 brokers, 2 controllers and 2 group coordinators (``--brokers N --controllers M
--coordinators C``; 0 coordinators disables consumer groups).

then supervises (:mod:`headwater.dev.supervise`): a child that dies (etcd included) is
reported on stderr (its exit code or signal and the last lines of its log) and restarted
with backoff (1 s doubling to 30 s; reset after a minute up) on the same ports, data and
flags, while the others keep running. With ``--no-restart`` the first death stops the
whole cluster and the command exits 1 (for debugging). Ctrl-C (SIGINT) or SIGTERM stops
every child by PID (coordinators, brokers, controllers, etcd) and exits 0. Data stays in
``--data-dir`` so the next run continues where this one stopped.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from headwater.dev.cluster import LocalCluster
from headwater.dev.procs import StartupError
from headwater.dev.supervise import Supervisor, cluster_children


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="headwater dev",
        description="Start etcd, controller(s) and broker(s) as child processes on 127.0.0.1.",
    )
    ap.add_argument("--data-dir", type=Path, default=Path("./data"), help="default ./data")
    ap.add_argument("--brokers", type=int, default=3, help="default 3")
    ap.add_argument(
        "--controllers", type=int, default=2, help="default 2 (one active, one standby)"
    )
    ap.add_argument("--coordinators", type=int, default=2, help="group coordinators, default 2")
    ap.add_argument("--log-dirs-per-broker", type=int, default=1)
    ap.add_argument("--racks", default="", help="comma-separated rack per broker (optional)")
    ap.add_argument("--startup-timeout", type=float, default=90.0, help="seconds")
    ap.add_argument(
        "--tls",
        action="store_true",
        help="TLS + client certificates (mTLS) on every endpoint; prints the client's files",
    )
    ap.add_argument(
        "--no-restart",
        action="store_true",
        help="stop the whole cluster when a child process dies instead of restarting it",
    )
    a = ap.parse_args(argv)
    for name in ("brokers", "controllers", "log_dirs_per_broker"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.coordinators < 0:
        ap.error("--coordinators must be >= 0")
    return a


def run_dev(
    data_dir: Path,
    *,
    brokers: int = 3,
    controllers: int = 2,
    coordinators: int = 2,
    log_dirs_per_broker: int = 1,
    racks: list[str] | None = None,
    startup_timeout: float = 90.0,
    stop: threading.Event | None = None,
    tls: bool = False,
    restart: bool = True,
) -> int:
    """Start the cluster, print its addresses, supervise it until ``stop`` (or a signal),
    stop it. ``restart=False``: a child's death stops everything (returns 1)."""
    stop = stop or threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster = LocalCluster(
        data_dir,
        brokers=brokers,
        controllers=controllers,
        coordinators=coordinators,
        log_dirs_per_broker=log_dirs_per_broker,
        racks=racks,
        startup_timeout=startup_timeout,
        tls=tls,
    )
    try:
        try:
            cluster.start()
        except StartupError as exc:
            print(f"headwater dev: cluster did not start: {exc}", file=sys.stderr, flush=True)
            return 1
        print(f"bootstrap: {cluster.bootstrap}", flush=True)
        for name, url in cluster.metrics_urls().items():
            print(f"metrics: {name} {url}", flush=True)
        print(f"controllers: {','.join(cluster.controller_addresses)}", flush=True)
        if cluster.coordinators:
            print(f"coordinators: {','.join(cluster.coordinator_addresses)}", flush=True)
        print(f"logs: {cluster.logs_dir}", flush=True)
        client = cluster.client_security()
        if client is not None and cluster.ca is not None:
            config = cluster.ca.directory / "client.json"
            files = {"ca_file": client.ca_file, "cert_file": client.cert_file}
            files["key_file"] = client.key_file
            config.write_text(json.dumps(files, indent=2) + "\n")
            print(f"tls-ca: {client.ca_file}", flush=True)
            print(f"tls-cert: {client.cert_file}", flush=True)
            print(f"tls-key: {client.key_file}", flush=True)
            print(f"tls-client-config: {config}", flush=True)
        print("press Ctrl-C to stop", file=sys.stderr, flush=True)
        supervisor = Supervisor(cluster_children(cluster), restart=restart)
        while not stop.wait(0.5):
            if not supervisor.poll():
                return 1
        return 0
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print("headwater dev: stopped", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    racks = [r.strip() for r in a.racks.split(",") if r.strip()] or None
    return run_dev(
        a.data_dir,
        brokers=a.brokers,
        controllers=a.controllers,
        coordinators=a.coordinators,
        log_dirs_per_broker=a.log_dirs_per_broker,
        racks=racks,
        startup_timeout=a.startup_timeout,
        tls=a.tls,
        restart=not a.no_restart,
    )


if __name__ == "__main__":
    raise SystemExit(main())
