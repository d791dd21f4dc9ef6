"""The CRDs (charts/headwater/crds/) on a real kube-apiserver: OpenAPI validation, defaults,
CEL rules, the status subresource and the printer columns; and the operator's RBAC from the
chart, checked by the API server's own authorizer (``kubectl auth can-i``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.wait import wait_for
from tests.k8s.apiserver import REPO, tools_env

CRDS = REPO / "charts" / "headwater" / "crds"
CHART = REPO / "charts" / "headwater"
NS = "hw-crds"


class Kubectl:
    def __init__(self, k8s_tools: Path, kubeconfig: Path) -> None:
        self.bin = str(k8s_tools / "kubectl")
        self.env = tools_env(k8s_tools, kubeconfig)

    def __call__(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.bin, *args], input=stdin, env=self.env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc

    def create(self, obj: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
        return self("create", "-n", NS, "-f", "-", stdin=json.dumps(obj), check=check)

    def get(self, kind: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self("get", "-n", NS, kind, name, "-o", "json").stdout)
        return out


@pytest.fixture(scope="module")
def kubectl(k8s_tools: Path, kube_apiserver: Path) -> Kubectl:
    k = Kubectl(k8s_tools, kube_apiserver)
    k("apply", "-f", str(CRDS))
    for crd in ("topics.headwater.dev", "consumergroups.headwater.dev"):
        k("wait", "--for=condition=Established", "--timeout=30s", f"crd/{crd}")
    k("create", "namespace", NS)
    # a CRD is Established before its REST endpoint and discovery are served everywhere
    both = "topics.headwater.dev,consumergroups.headwater.dev"
    wait_for(
        lambda: k("get", "-n", NS, both, check=False).returncode == 0,
        timeout=30,
        what="the CRDs' endpoints to answer",
        interval=0.2,
    )
    return k


def topic(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "headwater.dev/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name},
        "spec": spec,
    }


def group(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "headwater.dev/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_crd_files_are_the_contract() -> None:
    docs = {p.name: yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("*.yaml"))}
    assert set(docs) == {"topics.headwater.dev.yaml", "consumergroups.headwater.dev.yaml"}
    for doc in docs.values():
        assert doc["spec"]["group"] == "headwater.dev"
        assert doc["spec"]["scope"] == "Namespaced"
        (version,) = doc["spec"]["versions"]
        assert version["name"] == "v1alpha1"
        assert version["subresources"] == {"status": {}}
    names = docs["topics.headwater.dev.yaml"]["spec"]["names"]
    assert (names["plural"], names["shortNames"]) == ("topics", ["hwt"])
    names = docs["consumergroups.headwater.dev.yaml"]["spec"]["names"]
    assert (names["plural"], names["shortNames"]) == ("consumergroups", ["hwcg"])


def test_topic_defaults_and_status_subresource(kubectl: Kubectl) -> None:
    kubectl.create(topic("orders", partitions=3, replicationFactor=2, config={"retention.ms": "1"}))
    got = kubectl.get("hwt", "orders")
    assert got["spec"]["deletionPolicy"] == "Delete"  # defaulted by the schema
    # status is a subresource: a main-resource update ignores it, /status takes it
    got["status"] = {"partitions": 3}
    kubectl("replace", "-n", NS, "-f", "-", stdin=json.dumps(got))
    assert "status" not in kubectl.get("hwt", "orders")
    status = {"status": {"partitions": 3, "underReplicated": 0, "topicId": "abc"}}
    kubectl(
        "patch", "-n", NS, "hwt", "orders", "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip
    assert kubectl.get("hwt", "orders")["status"]["topicId"] == "abc"
    cond = {"type": "Ready", "status": "True", "reason": "Created", "message": "ok"}
    kubectl(
        "patch", "-n", NS, "hwt", "orders", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"conditions": [cond]}}),
    )  # fmt: skip
    header, row = kubectl("get", "-n", NS, "hwt", "orders").stdout.splitlines()
    assert header.split() == ["NAME", "PARTITIONS", "REPLICAS", "READY", "AGE"]
    assert row.split()[:4] == ["orders", "3", "2", "True"]
    header, row = kubectl("get", "-n", NS, "hwt", "orders", "-o", "wide").stdout.splitlines()
    assert header.split()[:7] == [
        "NAME", "PARTITIONS", "REPLICAS", "READY", "REASON", "TOPIC-NAME", "UNDER-REPLICATED"
    ]  # fmt: skip
    assert row.split()[:5] == ["orders", "3", "2", "True", "Created"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"partitions": 0, "replicationFactor": 1}, "spec.partitions"),
        ({"replicationFactor": 1}, "spec.partitions: Required value"),
        ({"partitions": 1, "replicationFactor": 0}, "spec.replicationFactor"),
        ({"partitions": 1, "replicationFactor": 1, "deletionPolicy": "Orphan"}, "Unsupported"),
        ({"partitions": 1, "replicationFactor": 1, "config": {"retention.ms": 5}}, "config"),
        ({"partitions": 1, "replicationFactor": 1, "topicName": "a b"}, "spec.topicName"),
        ({"partitions": 1, "replicationFactor": 1, "replicas": 3}, 'unknown field "spec.replicas"'),
    ],
)
def test_topic_validation(kubectl: Kubectl, spec: dict[str, Any], message: str) -> None:
    proc = kubectl.create(topic("bad", **spec), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_topic_name_is_immutable(kubectl: Kubectl) -> None:
    kubectl.create(topic("named", partitions=1, replicationFactor=1, topicName="Named_Topic"))
    proc = kubectl(
        "patch", "-n", NS, "hwt", "named", "--type=merge",
        "-p", json.dumps({"spec": {"topicName": "Other"}}), check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "topicName is immutable" in proc.stderr


def test_consumer_group_validation_and_columns(kubectl: Kubectl) -> None:
    kubectl.create(group("payments", groupId="payments", reset={"to": "earliest", "id": "1"}))
    bad = [
        ({"groupId": "g", "reset": {"to": "timestamp", "id": "1"}}, "needs reset.timestamp"),
        ({"groupId": "g", "reset": {"to": "offsets", "id": "1"}}, "needs reset.offsets"),
        ({"groupId": "g", "reset": {"to": "middle", "id": "1"}}, "Unsupported value"),
        ({"groupId": "g", "reset": {"to": "latest"}}, "spec.reset.id: Required value"),
        ({"reset": {"to": "latest", "id": "1"}}, "spec.groupId: Required value"),
        (
            {
                "groupId": "g",
                "reset": {"to": "offsets", "id": "1", "offsets": [{"topic": "t", "partition": 0}]},
            },
            "offset: Required value",
        ),
    ]
    for spec, message in bad:
        proc = kubectl.create(group("bad", **spec), check=False)
        assert proc.returncode != 0, spec
        assert message in proc.stderr, (spec, proc.stderr)
    ok = {"groupId": "g2", "reset": {"to": "timestamp", "id": "a", "timestamp": 1700000000000}}
    kubectl.create(group("by-time", **ok))
    proc = kubectl(
        "patch", "-n", NS, "hwcg", "payments", "--type=merge",
        "-p", json.dumps({"spec": {"groupId": "other"}}), check=False,
    )  # fmt: skip
    assert "groupId is immutable" in proc.stderr
    status = {"status": {"state": "Empty", "members": 0, "totalLag": 42, "lastResetId": "1"}}
    kubectl(
        "patch", "-n", NS, "hwcg", "payments", "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip
    header, row = kubectl("get", "-n", NS, "hwcg", "payments").stdout.splitlines()
    assert header.split()[:5] == ["NAME", "GROUP", "STATE", "MEMBERS", "LAG"]
    assert row.split()[:5] == ["payments", "payments", "Empty", "0", "42"]


def test_operator_rbac_from_the_chart(kubectl: Kubectl, k8s_tools: Path) -> None:
    """Install only the chart's RBAC (rendered by helm) and ask the API server what the
    operator's ServiceAccount may do: exactly what kopf and the handlers need."""
    ns = "hw-rbac"
    kubectl("create", "namespace", ns)
    kubectl("create", "namespace", "team-a")
    rendered = subprocess.run(
        [str(k8s_tools / "helm"), "template", "rb", str(CHART), "-n", ns,
         "--set", "operator.namespaces={team-a}", "-s", "templates/rbac.yaml",
         "-s", "templates/operator.yaml"],
        env=kubectl.env, capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] != "Deployment"]
    for d in docs:  # helm template leaves the release namespace out; `helm install` adds it
        if not d["kind"].startswith("Cluster"):
            d["metadata"].setdefault("namespace", ns)
    kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in docs))
    sa = f"system:serviceaccount:{ns}:rb-headwater-operator"

    def can(verb: str, resource: str, namespace: str | None, sub: str | None = None) -> bool:
        args = ["auth", "can-i", verb, resource, "--as", sa]
        if namespace:
            args += ["-n", namespace]
        if sub:
            args += ["--subresource", sub]
        return kubectl(*args, check=False).stdout.strip() == "yes"

    for namespace in (ns, "team-a"):
        for verb in ("get", "list", "watch", "patch"):
            assert can(verb, "topics.headwater.dev", namespace)
            assert can(verb, "consumergroups.headwater.dev", namespace)
        assert can("patch", "topics.headwater.dev", namespace, "status")
        assert can("patch", "consumergroups.headwater.dev", namespace, "status")
        assert can("create", "events", namespace)
    assert can("list", "customresourcedefinitions.apiextensions.k8s.io", None)
    assert can("watch", "namespaces", None)
    # and nothing more: not other namespaces, not deleting resources, no secrets
    assert not can("list", "topics.headwater.dev", "default")
    assert not can("delete", "topics.headwater.dev", ns)
    assert not can("get", "secrets", ns)
    assert not can("create", "topics.headwater.dev", ns)
