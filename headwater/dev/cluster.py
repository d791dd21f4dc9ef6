"""``LocalCluster``: etcd, controllers and brokers as child processes in one data folder.

Layout under ``data_dir``::

    etcd/                     etcd's data
    broker-<id>/log-<k>/      each broker's log directories
    run/<name>.ready          ready files ({"port": P, "metrics_port": M}, written when serving)
    logs/<name>.log           each process's output

Ports are picked at run time (services bind port 0 and report the port in the ready file).
Readiness is waited for with bounded deadlines: ready file, gRPC health SERVING, and for a
broker, the broker listing itself in its Metadata answer (which only happens once the active
controller has registered it and pushed UpdateMetadata). Processes are stopped by PID
(SIGTERM, then SIGKILL after a timeout); coordinators, brokers, controllers, then etcd.

Process contracts: ``python -m services.controller --controller-id N --host H --port 0
--etcd E --metrics-port 0 --ready-file F``, ``python -m services.broker --broker-id N
--host H --port 0 --data-dirs d1[,d2] --etcd E --metrics-port 0 --ready-file F [--rack R]``
and ``python -m services.coordinator --coordinator-id N --host H --port 0 --etcd E
--metrics-port 0 --ready-file F`` (coordinators start after the brokers: they create
``__consumer_offsets`` through the controller; they stop first).

TLS (``tls=True``; docs/security.md): a CA in ``<data_dir>/tls`` (or the given ``ca_dir``,
shared between clusters) issues a certificate per process (``CN=<kind>-<id>``, SANs
127.0.0.1 and localhost) and one for clients (``CN=client``: :meth:`LocalCluster.client_security`).
etcd serves https and requires client certificates; every service gets ``--tls-cert/--tls-key/
--tls-ca --tls-client-auth <tls_client_auth>`` (default required: mTLS) and ``--etcd-ca/
--etcd-cert/--etcd-key``, so client, broker<->broker, controller<->broker and coordinator
traffic is all TLS. ``security_args`` are appended to every service's flags (e.g.
``--principal-mapping-rules``, the authorizer flags).

``LocalCluster.default_tls`` / ``default_ca_dir`` (class attributes) are the values used when
``tls`` / ``ca_dir`` are not given: the test suite's TLS switch (HEADWATER_TEST_TLS=1) sets
them; ``default_authorizer`` / ``default_super_users`` / ``default_admin_password`` likewise
for ``authorizer`` (HEADWATER_TEST_SECURITY=1).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import secrets
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.client.security import ClientSecurity, default_security
from headwater.dev.etcd_server import EtcdServer
from headwater.dev.procs import ChildProcess, python_env, wait_until
from headwater.dev.tls import CertificateAuthority, Issued
from headwater.platform import etcd as hetcd
from headwater.platform.auth import credentials
from headwater.v1 import broker_pb2_grpc, metadata_pb2

HOST = "127.0.0.1"


@dataclass
class ServiceProcess:
    """A controller or broker child process and what its ready file reported."""

    kind: str  # "controller" | "broker" | "coordinator"
    node_id: int
    argv: list[str]
    log_path: Path
    ready_file: Path
    child: ChildProcess | None = None
    port: int = 0
    metrics_port: int = 0
    extra: dict[str, object] = field(default_factory=dict)
    #: How the launcher itself talks to the process (health checks); None: plaintext.
    security: ClientSecurity | None = None
    #: Extra environment of the child (e.g. HEADWATER_SERVICE_USER, the internal token's name).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.node_id}"

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{HOST}:{self.metrics_port}/metrics"

    def start(self) -> None:
        self.ready_file.unlink(missing_ok=True)
        self.port = self.metrics_port = 0
        self.child = ChildProcess(self.name, self.argv, self.log_path, env=python_env() | self.env)
        self.child.start()

    def alive(self) -> bool:
        return self.child is not None and self.child.alive()

    @property
    def pid(self) -> int:
        assert self.child is not None
        return self.child.pid

    def read_ready(self) -> bool:
        try:
            info = json.loads(self.ready_file.read_text())
        except (OSError, ValueError):
            return False
        self.port = int(info["port"])
        self.metrics_port = int(info.get("metrics_port") or 0)
        return True

    def serving(self) -> bool:
        if not self.port:
            return False
        with sync_channel(self.address, self.security) as ch:
            try:
                resp = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=1
                )
            except grpc.RpcError:
                return False
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)

    def stop(self, timeout: float = 10.0) -> None:
        if self.child is not None:
            self.child.stop(timeout)

    def kill9(self) -> None:
        if self.child is not None:
            self.child.kill9()


def sync_channel(address: str, security: ClientSecurity | None = None) -> grpc.Channel:
    """A blocking gRPC channel to ``address``: TLS with ``security`` (or, when None, the
    process default of :func:`headwater.client.security.set_default_security`), else
    plaintext. For launchers and tests."""
    sec = security if security is not None else default_security()
    if sec is not None and sec.tls:
        return grpc.secure_channel(address, sec.channel_credentials(), sec.channel_options())
    return grpc.insecure_channel(address)


def broker_registered(address: str, broker_id: int, security: ClientSecurity | None = None) -> bool:
    """True when the broker at ``address`` lists ``broker_id`` in its Metadata answer."""
    with sync_channel(address, security) as ch:
        try:
            resp = broker_pb2_grpc.BrokerStub(ch).Metadata(
                metadata_pb2.MetadataRequest(), timeout=2
            )
        except grpc.RpcError:
            return False
    return any(b.broker_id == broker_id for b in resp.brokers)


def controller_process(
    cid: int, etcd: str, run_dir: Path, logs_dir: Path, *, lease_ttl: int = 5
) -> ServiceProcess:
    """A (not yet started) controller process."""
    ready = run_dir / f"controller-{cid}.ready"
    argv = [
        sys.executable, "-m", "services.controller",
        "--controller-id", str(cid), "--host", HOST, "--port", "0",
        "--etcd", etcd, "--metrics-port", "0",
        "--ready-file", str(ready), "--lease-ttl", str(lease_ttl),
    ]  # fmt: skip
    return ServiceProcess("controller", cid, argv, logs_dir / f"controller-{cid}.log", ready)


def broker_process(
    bid: int,
    etcd: str,
    data_dirs: Sequence[Path],
    run_dir: Path,
    logs_dir: Path,
    rack: str | None = None,
    extra_args: Sequence[str] = (),
) -> ServiceProcess:
    """A (not yet started) broker process."""
    ready = run_dir / f"broker-{bid}.ready"
    for d in data_dirs:
        Path(d).mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable, "-m", "services.broker",
        "--broker-id", str(bid), "--host", HOST, "--port", "0",
        "--data-dirs", ",".join(str(d) for d in data_dirs),
        "--etcd", etcd, "--metrics-port", "0",
        "--ready-file", str(ready),
    ]  # fmt: skip
    if rack:
        argv += ["--rack", rack]
    argv += list(extra_args)
    return ServiceProcess("broker", bid, argv, logs_dir / f"broker-{bid}.log", ready)


def coordinator_process(
    cid: int, etcd: str, run_dir: Path, logs_dir: Path, extra_args: Sequence[str] = ()
) -> ServiceProcess:
    """A (not yet started) group coordinator process."""
    ready = run_dir / f"coordinator-{cid}.ready"
    argv = [
        sys.executable, "-m", "services.coordinator",
        "--coordinator-id", str(cid), "--host", HOST, "--port", "0",
        "--etcd", etcd, "--metrics-port", "0",
        "--ready-file", str(ready),
    ]  # fmt: skip
    argv += list(extra_args)
    return ServiceProcess("coordinator", cid, argv, logs_dir / f"coordinator-{cid}.log", ready)


def wait_serving(proc: ServiceProcess, timeout: float) -> None:
    """Wait (bounded) until ``proc`` wrote its ready file and answers health SERVING."""
    assert proc.child is not None
    wait_until(
        lambda: proc.read_ready() and proc.serving(),
        timeout=timeout,
        what=f"{proc.name} to serve",
        watch=[proc.child],
    )


class LocalCluster:
    """A whole Headwater cluster on 127.0.0.1. Use as a context manager or start()/stop().

    Controllers have ids 1..``controllers``, brokers 1..``brokers``, group coordinators
    1..``coordinators`` (default none). ``racks``: one rack name per broker (optional).
    ``coordinator_args``: extra flags for every coordinator (e.g. offsets-topic partitions).
    ``launch_prefix``: maps a process name (``broker-1``) to an argv prefix for that service's
    command line, e.g. a memory cap (tests/fuzz/memcap.py); the prefix must ``exec`` the
    service so the PID stays the service's.
    """

    def __init__(
        self,
        data_dir: Path | str,
        *,
        brokers: int = 1,
        controllers: int = 1,
        log_dirs_per_broker: int = 1,
        racks: Sequence[str] | None = None,
        etcd_unsafe_no_fsync: bool = False,
        controller_lease_ttl: int = 5,
        startup_timeout: float = 60.0,
        broker_args: Sequence[str] = (),
        coordinators: int = 0,
        coordinator_args: Sequence[str] = (),
        tls: bool | None = None,
        tls_client_auth: str = "required",
        ca_dir: Path | str | None = None,
        security_args: Sequence[str] = (),
        authorizer: bool | None = None,
        super_users: Sequence[str] = (),
        launch_prefix: Callable[[str], Sequence[str]] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.logs_dir = self.data_dir / "logs"
        self.run_dir = self.data_dir / "run"
        self.startup_timeout = startup_timeout
        self.tls = self.default_tls if tls is None else tls
        self.tls_client_auth = tls_client_auth
        self._security_args = list(security_args)
        #: Authorizer on (docs/security.md): every service gets ``--authorizer`` and the super
        #: users (``User:admin`` and ``super_users``); ``admin`` gets SCRAM credentials written
        #: to etcd at start (:meth:`admin_security`). The services need no entry: they call
        #: each other with internal tokens minted with the cluster key from etcd, on every
        #: cluster (headwater.platform.auth.service.attach_service).
        self.authorizer = self.default_authorizer if authorizer is None else authorizer
        self.admin_password = self.default_admin_password or secrets.token_hex(12)
        if self.authorizer:
            supers = ["User:admin", *self.default_super_users]
            supers += super_users
            self._security_args += ["--authorizer", "--super-users", ";".join(supers)]
        self.ca: CertificateAuthority | None = None
        etcd_tls: Issued | None = None
        if self.tls:
            ca_path = ca_dir if ca_dir is not None else self.default_ca_dir
            self.ca = CertificateAuthority(ca_path or self.data_dir / "tls")
            etcd_tls = self.ca.issued("etcd")
        self.etcd = EtcdServer(
            self.data_dir / "etcd",
            self.logs_dir / "etcd.log",
            unsafe_no_fsync=etcd_unsafe_no_fsync,
            tls=etcd_tls,
            client_tls=self.ca.issued("client") if self.ca else None,
        )
        self._n_brokers = brokers
        self._n_controllers = controllers
        self._log_dirs = log_dirs_per_broker
        self._racks = list(racks) if racks else []
        self._lease_ttl = controller_lease_ttl
        self._broker_args = list(broker_args)
        self._n_coordinators = coordinators
        self._coordinator_args = list(coordinator_args)
        self._launch_prefix = launch_prefix
        self.coordinators: dict[int, ServiceProcess] = {}
        self.controllers: dict[int, ServiceProcess] = {}
        self.brokers: dict[int, ServiceProcess] = {}

    #: ``tls`` when not given (the test suite's HEADWATER_TEST_TLS switch sets it).
    default_tls: bool = False
    #: ``ca_dir`` when not given and TLS is on (None: ``<data_dir>/tls``).
    default_ca_dir: Path | None = None
    #: ``authorizer`` when not given, extra super users of every authorizing cluster and the
    #: admin's password (None: random per cluster); the HEADWATER_TEST_SECURITY switch sets them.
    default_authorizer: bool = False
    default_super_users: tuple[str, ...] = ()
    default_admin_password: str | None = None

    # ---- security

    def client_security(self, name: str = "client") -> ClientSecurity | None:
        """What a client needs to reach this cluster: its CA and a client certificate
        (``CN=<name>``, issued on first use); None when the cluster is plaintext."""
        if self.ca is None:
            return None
        issued = self.ca.issued(name)
        return ClientSecurity(str(issued.ca), str(issued.cert), str(issued.key))

    def _service_security_args(self, name: str) -> list[str]:
        if self.ca is None:
            return list(self._security_args)
        own, client = self.ca.issued(name), self.ca.issued("client")
        return [
            "--tls-cert", str(own.cert), "--tls-key", str(own.key), "--tls-ca", str(own.ca),
            "--tls-client-auth", self.tls_client_auth,
            "--etcd-ca", str(own.ca), "--etcd-cert", str(client.cert),
            "--etcd-key", str(client.key),
            *self._security_args,
        ]  # fmt: skip

    def _secured(self, proc: ServiceProcess) -> ServiceProcess:
        """``proc`` with the cluster's security flags (and its launch prefix, if any)."""
        proc.argv += self._service_security_args(proc.name)
        if self._launch_prefix is not None:
            proc.argv[:0] = list(self._launch_prefix(proc.name))
        proc.security = self.client_security()
        return proc

    def admin_security(self, mechanism: str = "SCRAM-SHA-512") -> ClientSecurity:
        """The super user ``admin`` (SCRAM), over TLS when the cluster has it."""
        tls = self.client_security()
        return ClientSecurity(
            ca_file=tls.ca_file if tls else None,
            cert_file=tls.cert_file if tls else None,
            key_file=tls.key_file if tls else None,
            username="admin",
            password=self.admin_password,
            mechanism=mechanism,
        )

    def user_security(
        self, user: str, password: str, mechanism: str = "SCRAM-SHA-512"
    ) -> ClientSecurity:
        """A SCRAM user's client security (TLS files without a client certificate)."""
        tls = self.client_security()
        return ClientSecurity(
            ca_file=tls.ca_file if tls else None,
            username=user,
            password=password,
            mechanism=mechanism,
        )

    def _bootstrap_admin(self) -> None:
        """Write the admin's SCRAM credentials into etcd (before any service starts)."""

        async def run() -> None:
            kw = self._etcd_client_kwargs()
            client = await hetcd.Etcd.connect(
                self.etcd.endpoint, ca=kw.get("ca"), cert=kw.get("cert"), key=kw.get("key")
            )
            try:
                await credentials.bootstrap_user(client, "admin", self.admin_password)
            finally:
                await client.close()

        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # callers may be on a loop
            pool.submit(asyncio.run, run()).result()

    def _etcd_client_kwargs(self) -> dict[str, str]:
        if self.ca is None:
            return {}
        client = self.ca.issued("client")
        return {"ca": str(client.ca), "cert": str(client.cert), "key": str(client.key)}

    # ---- process construction

    def _controller(self, cid: int) -> ServiceProcess:
        return self._secured(
            controller_process(
                cid, self.etcd.endpoint, self.run_dir, self.logs_dir, lease_ttl=self._lease_ttl
            )
        )

    def _broker(self, bid: int) -> ServiceProcess:
        dirs = [self.data_dir / f"broker-{bid}" / f"log-{k}" for k in range(self._log_dirs)]
        rack = self._racks[(bid - 1) % len(self._racks)] if self._racks else None
        return self._secured(
            broker_process(
                bid, self.etcd.endpoint, dirs, self.run_dir, self.logs_dir, rack, self._broker_args
            )
        )

    def _coordinator(self, cid: int) -> ServiceProcess:
        return self._secured(
            coordinator_process(
                cid, self.etcd.endpoint, self.run_dir, self.logs_dir, self._coordinator_args
            )
        )

    # ---- lifecycle

    def start(self) -> LocalCluster:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.etcd.start(timeout=self.startup_timeout)
            if self.authorizer:
                self._bootstrap_admin()
            for cid in range(1, self._n_controllers + 1):
                self.controllers[cid] = self._controller(cid)
                self.controllers[cid].start()
            for cid in self.controllers:
                self.wait_controller_ready(cid)
            for bid in range(1, self._n_brokers + 1):
                self.brokers[bid] = self._broker(bid)
                self.brokers[bid].start()
            for bid in self.brokers:
                self.wait_broker_ready(bid)
            for cid in range(1, self._n_coordinators + 1):
                self.coordinators[cid] = self._coordinator(cid)
                self.coordinators[cid].start()
            for cid in self.coordinators:
                self.wait_coordinator_ready(cid)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_controller_ready(self, cid: int, timeout: float | None = None) -> None:
        wait_serving(self.controllers[cid], timeout or self.startup_timeout)

    def wait_broker_ready(self, bid: int, timeout: float | None = None) -> None:
        proc = self.brokers[bid]
        assert proc.child is not None
        wait_until(
            lambda: proc.read_ready()
            and proc.serving()
            and broker_registered(proc.address, bid, proc.security),
            timeout=timeout or self.startup_timeout,
            what=f"{proc.name} to serve and be registered by the controller",
            watch=[proc.child],
            interval=0.1,
        )

    def wait_coordinator_ready(self, cid: int, timeout: float | None = None) -> None:
        wait_serving(self.coordinators[cid], timeout or self.startup_timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every process by PID: coordinators, brokers, controllers, then etcd."""
        procs = [*self.coordinators.values(), *self.brokers.values(), *self.controllers.values()]
        for proc in procs:
            proc.stop(timeout)
        self.etcd.stop(timeout)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- addresses

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"`` of the first live broker."""
        for proc in self.brokers.values():
            if proc.alive() and proc.port:
                return proc.address
        raise RuntimeError("no live broker")

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(p.address for p in self.brokers.values() if p.alive() and p.port)

    @property
    def controller_addresses(self) -> list[str]:
        return [p.address for p in self.controllers.values() if p.alive() and p.port]

    @property
    def coordinator_addresses(self) -> list[str]:
        return [p.address for p in self.coordinators.values() if p.alive() and p.port]

    def metrics_urls(self) -> dict[str, str]:
        procs = [*self.controllers.values(), *self.brokers.values(), *self.coordinators.values()]
        return {p.name: p.metrics_url for p in procs if p.metrics_port > 0}

    # ---- faults (later issues' tests)

    def kill_broker(self, bid: int) -> None:
        """SIGKILL a broker (its registration expires with its lease)."""
        self.brokers[bid].kill9()

    def stop_broker(self, bid: int, timeout: float = 10.0) -> None:
        self.brokers[bid].stop(timeout)

    def restart_broker(self, bid: int, *, wait: bool = True) -> None:
        proc = self.brokers[bid]
        proc.stop()
        proc.start()
        if wait:
            self.wait_broker_ready(bid)

    def kill_controller(self, cid: int) -> None:
        self.controllers[cid].kill9()

    def restart_controller(self, cid: int, *, wait: bool = True) -> None:
        proc = self.controllers[cid]
        proc.stop()
        proc.start()
        if wait:
            self.wait_controller_ready(cid)

    def kill_coordinator(self, cid: int) -> None:
        """SIGKILL a coordinator (its registration expires with its lease)."""
        self.coordinators[cid].kill9()

    def restart_coordinator(self, cid: int, *, wait: bool = True) -> None:
        proc = self.coordinators[cid]
        proc.stop()
        proc.start()
        if wait:
            self.wait_coordinator_ready(cid)
