"""The chart's container commands run for real: no kubelet here, so the test does what the
kubelet would — takes each rendered container's command and args, expands ``$(VAR)`` from the
container's environment (pod name, pod IP), and starts the process — with only the ports, etcd
endpoint and volume paths swapped for local ones. A flag the service does not have, a broken
shell wrapper or a wrong broker id/rack would fail here, not in someone's cluster.

Checked: every service serves gRPC health, the broker registers under its ordinal with the pod's
stable DNS name (--advertised-host) and the rack the init container wrote, the controller and
coordinator register with their pod IP; with TLS values the broker serves TLS with the Secret's
files; the operator's rendered args parse.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.dev.procs import ChildProcess, free_port, python_env, wait_until
from headwater.dev.tls import CertificateAuthority
from headwater.platform import etcd as hetcd
from tests.helpers.chart import SCENARIOS, by_kind, container, template

NS = "headwater"
POD_IP = "127.0.0.1"
DOMAIN = "localhost"


def kubelet_expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command/args: defined variables are replaced, $$ is $."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


def container_env(c: dict[str, Any], pod_name: str) -> dict[str, str]:
    fields = {"metadata.name": pod_name, "metadata.namespace": NS, "status.podIP": POD_IP}
    out = {}
    for e in c.get("env", []):
        if "value" in e:
            out[e["name"]] = e["value"]
        else:
            out[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return out


class Pod:
    """One container of a rendered workload, run as a local process."""

    def __init__(
        self,
        obj: dict[str, Any],
        cname: str,
        pod_name: str,
        tmp: Path,
        etcd: str,
        paths: dict[str, Path],
    ) -> None:
        c = container(obj, cname)
        self.spec_env = container_env(c, pod_name)
        self.port = free_port()
        self.metrics_port = free_port()
        argv = []
        for word in [*c["command"], *c.get("args", [])]:
            word = kubelet_expand(word, self.spec_env)
            word = re.sub(r"^--port=\d+$", f"--port={self.port}", word)
            word = re.sub(r"^--metrics-port=\d+$", f"--metrics-port={self.metrics_port}", word)
            word = re.sub(r"^--etcd=.*$", f"--etcd={etcd}", word)
            for mount, local in paths.items():  # volumes -> local folders
                word = word.replace(mount, str(local))
            argv.append(word)
        self.argv = argv
        env = python_env()
        env.update(self.spec_env)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        self.child = ChildProcess(pod_name, argv, tmp / f"{pod_name}.log", env)

    def start(self) -> None:
        self.child.start()

    def http_status(self, probe: dict[str, Any]) -> int | None:
        """The HTTP status a rendered httpGet probe on the metrics port gets (None: no
        answer)."""
        assert probe["httpGet"]["port"] == "metrics", probe
        url = f"http://127.0.0.1:{self.metrics_port}{probe['httpGet']['path']}"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def serving(self, credentials: grpc.ChannelCredentials | None = None) -> bool:
        return self.health(credentials) == health_pb2.HealthCheckResponse.SERVING

    def health(
        self, credentials: grpc.ChannelCredentials | None = None, service: str = ""
    ) -> int | None:
        """The pod's health status of ``service`` ("" overall), or None when it does not
        answer (not up, TLS refused, unknown service)."""
        target = f"127.0.0.1:{self.port}"
        channel = (
            grpc.secure_channel(target, credentials)
            if credentials is not None
            else grpc.insecure_channel(target)
        )
        try:
            stub = health_pb2_grpc.HealthStub(channel)
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            return int(reply.status)
        except grpc.RpcError:
            return None
        finally:
            channel.close()


def registrations(endpoint: str, prefix: str) -> dict[str, dict[str, Any]]:
    async def run() -> dict[str, dict[str, Any]]:
        client = await hetcd.Etcd.connect(endpoint)
        try:
            snap = await client.get_prefix(prefix)
        finally:
            await client.close()
        return {kv.key: json.loads(kv.value) for kv in snap.items}

    return asyncio.run(run())


@pytest.fixture
def pods() -> Iterator[list[Pod]]:
    started: list[Pod] = []
    yield started
    for pod in reversed(started):
        pod.child.stop(timeout=20)


def test_rendered_commands_start_the_services(
    k8s_tools: Path, etcd: str, tmp_path: Path, pods: list[Pod]
) -> None:
    # cluster domain "localhost": gRPC resolves *.localhost to loopback (RFC 6761), so the
    # pod DNS names the broker advertises are reachable here as they would be in a cluster
    docs = template(k8s_tools, SCENARIOS["full"], "--set", f"clusterDomain={DOMAIN}", namespace=NS)
    rack = tmp_path / "rack"
    rack.mkdir()
    (rack / "rack").write_text("zone-b")  # what the init container writes
    paths = {
        "/var/lib/headwater/data-0": tmp_path / "data-0",
        "/var/lib/headwater/data-1": tmp_path / "data-1",
        "/rack/rack": rack / "rack",
    }
    sts = by_kind(docs, "StatefulSet")["hw-headwater-broker"]
    deps = by_kind(docs, "Deployment")
    broker = Pod(sts, "broker", "hw-headwater-broker-2", tmp_path, etcd, paths)
    controller = Pod(
        deps["hw-headwater-controller"], "controller", "hw-headwater-controller-5d8f-x2x", tmp_path,
        etcd, paths,
    )  # fmt: skip
    coordinator = Pod(
        deps["hw-headwater-coordinator"], "coordinator", "hw-headwater-coordinator-77c-abcde",
        tmp_path, etcd, paths,
    )  # fmt: skip
    broker.start()
    pods.append(broker)
    # no controller yet: the broker's startup and liveness probes pass (the process is up), its
    # readiness probe does not (it has no cluster metadata), so it is not restarted while it
    # waits and takes no client traffic
    probes = container(sts, "broker")
    wait_until(
        lambda: broker.health(service=probes["startupProbe"]["grpc"]["service"])
        == health_pb2.HealthCheckResponse.SERVING,
        timeout=60,
        what="the broker's startup probe",
        watch=[broker.child],
    )
    assert broker.health(service=probes["livenessProbe"]["grpc"]["service"]) == (
        health_pb2.HealthCheckResponse.SERVING
    )
    readiness = probes["readinessProbe"]["grpc"].get("service", "")
    assert broker.health(service=readiness) == health_pb2.HealthCheckResponse.NOT_SERVING
    for pod in (controller, coordinator):
        pod.start()
        pods.append(pod)
    for pod in (broker, controller, coordinator):
        wait_until(pod.serving, timeout=60, what=f"{pod.child.name} SERVING", watch=[pod.child])

    brokers = registrations(etcd, "/headwater/brokers/ids/")
    assert list(brokers) == ["/headwater/brokers/ids/2"]  # the pod's ordinal
    reg = brokers["/headwater/brokers/ids/2"]
    dns = f"hw-headwater-broker-2.hw-headwater-broker-headless.{NS}.svc.{DOMAIN}"
    assert reg["host"] == dns
    assert reg["port"] == broker.port
    assert reg["rack"] == "zone-b"
    assert reg["static_configs"]["min.insync.replicas"] == "2"
    assert reg["static_configs"]["log.dirs"] == f"{tmp_path}/data-0,{tmp_path}/data-1"

    # a coordinator registers just after its server starts (services/coordinator/app.py)
    wait_until(
        lambda: bool(registrations(etcd, "/headwater/coordinators/ids/")),
        timeout=60,
        what="the coordinator registered",
        interval=0.5,
        watch=[coordinator.child],
    )
    (creg,) = registrations(etcd, "/headwater/coordinators/ids/").values()
    assert (creg["host"], creg["port"]) == (POD_IP, coordinator.port)
    assert 0 <= int(creg["coordinator_id"]) < 2**31


def test_rendered_tls_broker_serves_tls(
    k8s_tools: Path, etcd: str, tmp_path: Path, pods: list[Pod]
) -> None:
    docs = template(k8s_tools, SCENARIOS["tls"], namespace=NS)
    ca = CertificateAuthority(tmp_path / "pki")
    server = ca.issue("server", hosts=("127.0.0.1", "localhost"))
    client = ca.issue("admin", common_name="admin")
    secret = tmp_path / "secret"  # the Secret's keys, as the volume shows them
    secret.mkdir()
    (secret / "tls.crt").write_bytes(server.cert.read_bytes())
    (secret / "tls.key").write_bytes(server.key.read_bytes())
    (secret / "ca.crt").write_bytes(ca.cert_path.read_bytes())
    paths = {"/etc/headwater/tls": secret, "/var/lib/headwater/data-0": tmp_path / "data-0"}
    sts = by_kind(docs, "StatefulSet")["hw-headwater-broker"]
    broker = Pod(sts, "broker", "hw-headwater-broker-0", tmp_path, etcd, paths)
    broker.start()
    pods.append(broker)
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca.cert_path.read_bytes(),
        private_key=client.key.read_bytes(),
        certificate_chain=client.cert.read_bytes(),
    )
    # no controller runs here: the broker answers NOT_SERVING (it has no cluster metadata)
    wait_until(
        lambda: broker.health(creds) == health_pb2.HealthCheckResponse.NOT_SERVING,
        timeout=60,
        what="TLS broker answering health",
        watch=[broker.child],
    )
    # the process is up (what the liveness name says) whatever its readiness; the readiness
    # probe (plain HTTP on the metrics port: the kubelet's grpc probe cannot do TLS) says not
    # ready, as the gRPC health does
    assert broker.health(creds, service="liveness") == health_pb2.HealthCheckResponse.SERVING
    assert broker.http_status(container(sts, "broker")["readinessProbe"]) == 503
    assert broker.health() is None  # plaintext refused
    assert "--authorizer" in broker.argv


def test_rendered_operator_args_parse(k8s_tools: Path) -> None:
    from headwater_operator.__main__ import parse_args

    for scenario, expect_all in (("default", False), ("full", True)):
        docs = template(k8s_tools, SCENARIOS[scenario], namespace=NS)
        c = container(by_kind(docs, "Deployment")["hw-headwater-operator"], "operator")
        assert c["command"] == ["python", "-m", "headwater_operator"]
        config = parse_args(c["args"])
        assert config.bootstrap == "hw-headwater-broker:9092"
        assert config.all_namespaces is expect_all
        assert config.namespaces == (() if expect_all else (NS,))
