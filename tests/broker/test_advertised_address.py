"""``--advertised-host``/``--advertised-port``: the address a broker registers for clients and
peers when it differs from the one it binds (a Kubernetes pod binds 0.0.0.0 and advertises its
stable DNS name; charts/headwater)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.dev.procs import python_env
from tests.broker.broker_helpers import BrokerProc, read_registration


def test_registers_the_advertised_address(etcd: str, tmp_path: Path) -> None:
    broker = BrokerProc(
        7,
        tmp_path / "data",
        etcd,
        tmp_path / "broker.log",
        extra_args=[
            "--host", "0.0.0.0",
            "--advertised-host", "hw-broker-7.hw-broker-headless.ns.svc.cluster.local",
            "--advertised-port", "19092",
        ],
    )  # fmt: skip
    broker.start()
    try:
        reg = read_registration(etcd, 7)
        assert reg is not None
        value = reg[0]
        assert value["host"] == "hw-broker-7.hw-broker-headless.ns.svc.cluster.local"
        assert value["port"] == 19092
        assert value["metrics_url"] == (
            f"http://hw-broker-7.hw-broker-headless.ns.svc.cluster.local:{broker.metrics_port}"
            "/metrics"
        )
        # bound on every interface: reachable on loopback at the port it picked
        with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        # no controller has sent it the cluster's metadata: it answers, as not ready
        assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        assert broker.stop() == 0


def test_wildcard_bind_needs_an_advertised_host(tmp_path: Path) -> None:
    argv = [
        sys.executable, "-m", "services.broker", "--broker-id", "0", "--host", "0.0.0.0",
        "--data-dirs", str(tmp_path), "--etcd", "127.0.0.1:1",
    ]  # fmt: skip
    proc = subprocess.run(argv, env=python_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "set --advertised-host" in proc.stderr
