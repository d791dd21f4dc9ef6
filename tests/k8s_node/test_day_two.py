"""Day two of the chart on the test node (issue 16, item 6), on a release of its own.

The module's release ``day2`` in namespace ``hw-day2`` (scripts/k8s/install-chart.sh, the
operator off, small CPU requests) has its own StorageClass and static PersistentVolumes, so it
never takes the volumes of the shared release ``hw``. In file order:

1. ``helm upgrade`` changing a broker setting rolls the brokers one at a time (each new pod is
   deleted only after the previous one is Ready; the controller logs a controlled shutdown of
   each broker) while an idempotent acks=all producer Job keeps producing through the bootstrap
   Service: no send fails, and consuming back finds every acknowledged value exactly once.
2. ``helm upgrade --set broker.replicas=4``: broker 3 registers (metadata lists it), a
   partition reassignment moves a replica onto it, it joins the ISR and leads after a
   preferred election; the partition's records read back.
3. ``helm uninstall`` removes every pod; the broker PVCs stay (as Strimzi and the Bitnami chart
   keep them); deleting the namespace then completes within a bound and leaves nothing.

The fixture uninstalls and removes what is left in ``finally``.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.wait import wait_for
from tests.k8s_node.node import REPO, Node, install_chart

WORKLOAD = Path(__file__).with_name("day_two_workload.py")
IMAGES_JSON = Path.home() / ".cache" / "headwater-k8s" / "images" / "out" / "images.json"
RELEASE = "day2"
NS = "hw-day2"
FULL = f"{RELEASE}-headwater"
BOOTSTRAP = f"{FULL}-broker:9092"
STORAGE_CLASS = "hw-day2-local"
#: etcd + 4 brokers (after the scale-up) + spares
PVS = 6
#: every pod small: the node's 2 CPUs are shared with the release hw and other tests' releases
SMALL = [
    "--set", "operator.enabled=false",
    "--set", "broker.resources.requests.cpu=25m",
    "--set", "broker.resources.requests.memory=256Mi",
    "--set", "controller.resources.requests.cpu=10m",
    "--set", "coordinator.resources.requests.cpu=10m",
    "--set", "etcd.resources.requests.cpu=10m",
    "--set", f"broker.persistence.storageClass={STORAGE_CLASS}",
    "--set", "broker.persistence.size=1Gi",
    "--set", f"etcd.persistence.storageClass={STORAGE_CLASS}",
    "--set", "etcd.persistence.size=1Gi",
]  # fmt: skip
#: helm upgrade --wait bound: a roll of 4 brokers, each up to ~60 s on a loaded node
HELM_TIMEOUT_S = 15 * 60
NAMESPACE_GONE_S = 180
#: install (~4 min) + the roll of 3 brokers under a producer + the scale-up, on a loaded node
pytestmark = pytest.mark.timeout(45 * 60)


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Release:
    """Clients of the day-two release, every one through the node (in-node)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.image = json.loads(IMAGES_JSON.read_text())["headwater"]["ref"]

    def kubectl(self, *args: str, timeout: float = 120, input: str | None = None) -> str:
        return self.node.kubectl("-n", NS, *args, timeout=timeout, input=input)

    def helm(self, *args: str, timeout: float = HELM_TIMEOUT_S + 60) -> str:
        return self.node.run("helm", *args, "-n", NS, timeout=timeout).stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def toolbox(self, *argv: str, timeout: float = 120) -> str:
        """Run ``argv`` in the toolbox pod (services image, the workload mounted at /work)."""
        return self.kubectl("exec", "toolbox", "--", *argv, timeout=timeout)

    def cli(self, *args: str, timeout: float = 120) -> str:
        return self.toolbox("headwater", "--bootstrap", BOOTSTRAP, *args, timeout=timeout)

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli("--output", "json", *args))

    def pod_manifest(self, name: str, argv: list[str], *, job: bool) -> str:
        container = {
            "name": name,
            "image": self.image,
            "imagePullPolicy": "Never",
            "command": argv,
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
            "volumeMounts": [
                {"name": "work", "mountPath": "/work"},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        }
        spec = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
            "volumes": [
                {"name": "work", "configMap": {"name": "day2-workload"}},
                {"name": "tmp", "emptyDir": {}},
            ],
        }
        if not job:
            return json.dumps({"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": name}, "spec": spec})  # fmt: skip
        return json.dumps({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": spec}},
        })  # fmt: skip

    def workload(self, mode: str, topic: str) -> list[str]:
        return ["python", "/work/day_two_workload.py", mode, BOOTSTRAP, topic]

    def job_pod(self, job: str) -> str:
        pods = self.get("pods", "-l", f"job-name={job}")["items"]
        return str(pods[0]["metadata"]["name"]) if pods else ""

    def logs_so_far(self, job: str) -> str:
        """The job's last log line; empty while its pod is not started yet."""
        proc = self.node.run("kubectl", "-n", NS, "logs", f"job/{job}", "--tail=1", check=False)
        return proc.stdout if proc.returncode == 0 else ""

    def job_result(self, job: str) -> dict[str, Any]:
        logs = self.kubectl("logs", f"job/{job}")
        return dict(json.loads(logs.strip().splitlines()[-1]))

    def brokers(self) -> dict[int, dict[str, Any]]:
        pods = self.get("pods", "-l", "app.kubernetes.io/component=broker")["items"]
        return {int(p["metadata"]["name"].rsplit("-", 1)[1]): p for p in pods}

    def partitions(self, topic: str) -> list[dict[str, Any]]:
        return list(self.cli_json("topics", "describe", topic)[0]["partitions"])


def _ready_since(pod: dict[str, Any]) -> datetime | None:
    for c in pod["status"].get("conditions", []):
        if c["type"] == "Ready" and c["status"] == "True":
            return _ts(c["lastTransitionTime"])
    return None


def _all_ready(rel: Release, n: int) -> bool:
    pods = rel.brokers()
    return len(pods) == n and all(_ready_since(p) for p in pods.values())


def _in_sync(rel: Release, topic: str, replicas: int) -> bool:
    return all(len(p["isr"]) == replicas for p in rel.partitions(topic))


def _pv_dir(node: Node, i: int) -> Path:
    return node.node_dir / "pv" / f"{RELEASE}-{i}"


def _storage(node: Node) -> str:
    docs = [{
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Retain",
    }]  # fmt: skip
    for i in range(1, PVS + 1):
        docs.append({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"{STORAGE_CLASS}-pv{i}"},
            "spec": {
                "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"],
                "storageClassName": STORAGE_CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(_pv_dir(node, i)), "type": "Directory"},
            },
        })  # fmt: skip
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})


def _remove(node: Node) -> None:
    """Uninstall the release and remove its namespace, volumes and StorageClass (idempotent)."""
    node.run("helm", "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "5m",
             timeout=360, check=False)  # fmt: skip
    node.run("kubectl", "delete", "namespace", NS, "--ignore-not-found", "--timeout=5m",
             timeout=360, check=False)  # fmt: skip
    node.run("kubectl", "delete", "-f", "-", "--ignore-not-found", "--wait=true",
             input=_storage(node), timeout=180, check=False)  # fmt: skip
    for i in range(1, PVS + 1):
        shutil.rmtree(_pv_dir(node, i), ignore_errors=True)


@pytest.fixture(scope="module")
def day2(k8s_node: Node) -> Iterator[Release]:
    _remove(k8s_node)  # what an interrupted earlier run left
    try:
        for i in range(1, PVS + 1):
            d = _pv_dir(k8s_node, i)
            d.mkdir(parents=True, exist_ok=True)
            os.chown(d, 10001, 10001)
            d.chmod(0o770)
        k8s_node.kubectl("apply", "-f", "-", input=_storage(k8s_node))
        install_chart(*SMALL, release=RELEASE, namespace=NS)
        rel = Release(k8s_node)
        rel.kubectl("create", "configmap", "day2-workload", f"--from-file={WORKLOAD}")
        rel.kubectl("apply", "-f", "-", input=rel.pod_manifest(
            "toolbox", ["sleep", "infinity"], job=False))  # fmt: skip
        rel.kubectl("wait", "--for=condition=Ready", "pod/toolbox", "--timeout=180s", timeout=200)
        yield rel
    finally:
        _remove(k8s_node)


def test_helm_upgrade_rolls_brokers_one_at_a_time_and_a_producer_loses_nothing(
    day2: Release,
) -> None:
    rel = day2
    rel.cli("topics", "create", "roll", "--partitions", "6", "--replication-factor", "3",
            "--config", "min.insync.replicas=2")  # fmt: skip
    wait_for(lambda: _in_sync(rel, "roll", 3), timeout=120, what="roll in sync", interval=2)
    before = {i: p["metadata"]["uid"] for i, p in rel.brokers().items()}
    assert sorted(before) == [0, 1, 2]

    rel.kubectl("apply", "-f", "-", input=rel.pod_manifest(
        "producer", rel.workload("produce", "roll"), job=True))  # fmt: skip
    wait_for(lambda: '"progress"' in rel.logs_so_far("producer"),
             timeout=300, what="the producer's first acks", interval=2)  # fmt: skip

    started = time.monotonic()
    # a broker setting: the default retention of topics (a --config flag of every broker)
    rel.helm("upgrade", RELEASE, str(REPO / "charts" / "headwater"), "--reuse-values",
             "--set-string", "broker.config.retention\\.ms=172800000",
             "--wait", "--timeout", f"{HELM_TIMEOUT_S}s")  # fmt: skip
    roll_s = time.monotonic() - started

    after = rel.brokers()
    assert all(after[i]["metadata"]["uid"] != before[i] for i in before), "not every broker rolled"
    for p in after.values():
        args = p["spec"]["containers"][0]["args"]
        assert "--config=retention.ms=172800000" in args, args
    # one at a time, highest ordinal first: a broker's old pod is deleted only once the new
    # pod of the previous one is Ready (the StatefulSet controller's SuccessfulDelete events)
    deleted: dict[int, datetime] = {}
    for ev in rel.get("events")["items"]:
        msg = ev.get("message", "")
        if ev.get("reason") == "SuccessfulDelete" and f"Pod {FULL}-broker-" in msg:
            pod = msg.split(f"Pod {FULL}-broker-", 1)[1].split()[0]
            when = ev.get("lastTimestamp") or ev.get("eventTime")
            deleted[int(pod)] = _ts(when)
    assert sorted(deleted) == [0, 1, 2], deleted
    ready = {i: _ready_since(p) for i, p in after.items()}
    assert all(ready.values()), ready
    order = sorted(deleted, key=lambda i: deleted[i])
    assert order == [2, 1, 0], deleted
    for prev, nxt in itertools.pairwise(order):
        prev_ready = ready[prev]
        assert prev_ready is not None and deleted[nxt] >= prev_ready, (prev, nxt, deleted, ready)
    # controlled shutdown: the active controller moved each broker's leaderships before it left
    logs = "".join(
        rel.kubectl("logs", p["metadata"]["name"])
        for p in rel.get("pods", "-l", "app.kubernetes.io/component=controller")["items"]
    )
    for i in (0, 1, 2):
        assert f"controlled shutdown of broker {i}:" in logs, logs[-3000:]
    steps = [(deleted[order[0]], ready[order[0]])] + [
        (ready[a], ready[b]) for a, b in itertools.pairwise(order)
    ]
    per_broker = [(b - a).total_seconds() for a, b in steps if a is not None and b is not None]
    print(f"roll: helm upgrade --wait {roll_s:.0f} s; per broker (s): {per_broker}")

    producer_pod = rel.job_pod("producer")
    rel.kubectl("exec", producer_pod, "--", "touch", "/tmp/stop")
    rel.kubectl("wait", "--for=condition=complete", "job/producer", "--timeout=300s",
                timeout=320)  # fmt: skip
    produced = rel.job_result("producer")
    assert produced["failed"] == {}, produced["failed"]
    acked = {v for a, b in produced["acked"] for v in range(a, b + 1)}
    assert len(acked) == produced["sent"], (len(acked), produced["sent"])
    wait_for(lambda: _in_sync(rel, "roll", 3), timeout=180, what="ISR back to 3", interval=2)

    consumed = json.loads(rel.toolbox(*rel.workload("consume", "roll"), timeout=600))
    read = {v for a, b in consumed["values"] for v in range(a, b + 1)}
    assert consumed["duplicates"] == [], consumed["duplicates"][:20]
    assert consumed["positions"] == consumed["end_offsets"], consumed
    assert acked - read == set(), sorted(acked - read)[:20]
    assert read == acked, sorted(read - acked)[:20]
    print(f"roll: {len(acked)} records acknowledged and read back once each")


def test_scaling_to_four_brokers_gives_a_broker_that_takes_a_reassigned_replica(
    day2: Release,
) -> None:
    rel = day2
    rel.cli("topics", "create", "scale", "--partitions", "1", "--replication-factor", "3")
    wait_for(lambda: _in_sync(rel, "scale", 3), timeout=120, what="scale in sync", interval=2)
    old = rel.partitions("scale")[0]
    assert 3 not in old["replicas"], old
    lines = "".join(f"k{i}:v{i}\n" for i in range(200))
    rel.kubectl("exec", "-i", "toolbox", "--", "headwater", "--bootstrap", BOOTSTRAP, "produce",
                "scale", "--acks", "all", "--key-separator", ":", input=lines)  # fmt: skip

    started = time.monotonic()
    rel.helm("upgrade", RELEASE, str(REPO / "charts" / "headwater"), "--reuse-values",
             "--set", "broker.replicas=4", "--wait", "--timeout", f"{HELM_TIMEOUT_S}s")  # fmt: skip
    print(f"scale: helm upgrade --set broker.replicas=4 --wait {time.monotonic() - started:.0f} s")
    assert _all_ready(rel, 4)
    wait_for(lambda: 3 in {b["broker_id"] for b in rel.cli_json("metadata")["brokers"]},
             timeout=120, what="broker 3 in metadata", interval=2)  # fmt: skip

    target = [3, *old["replicas"][:2]]
    started = time.monotonic()
    rel.cli("partitions", "reassign", "--topic", "scale", "--partition", "0",
            "--replicas", ",".join(map(str, target)))  # fmt: skip

    def reassigned() -> bool:
        p = rel.partitions("scale")[0]
        return p["replicas"] == target and sorted(p["isr"]) == sorted(target)

    wait_for(reassigned, timeout=180, what="replica on broker 3 in sync", interval=2)
    print(f"scale: reassignment onto broker 3 in sync after {time.monotonic() - started:.0f} s")
    assert "scale" not in rel.cli("partitions", "reassign", "--list")
    rel.cli("partitions", "elect-leaders", "--topic", "scale", "--partition", "0")
    wait_for(lambda: rel.partitions("scale")[0]["leader"] == 3, timeout=60,
             what="broker 3 leads", interval=2)  # fmt: skip
    out = rel.cli("consume", "scale", "--from-beginning", "--max-messages", "200",
                  "--timeout-ms", "60000", timeout=120)  # fmt: skip
    assert sorted(line for line in out.splitlines() if line.startswith("v")) == sorted(
        f"v{i}" for i in range(200)
    )


def test_helm_uninstall_leaves_no_stuck_namespace_or_resource(day2: Release) -> None:
    rel = day2
    pvcs = {p["metadata"]["name"] for p in rel.get("pvc")["items"]}
    assert {f"data-0-{FULL}-broker-{i}" for i in range(4)} <= pvcs, pvcs
    rel.node.run("helm", "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "5m",
                 timeout=360)  # fmt: skip
    assert RELEASE not in rel.helm("list", "-q")
    selector = f"app.kubernetes.io/instance={RELEASE}"
    wait_for(lambda: not rel.get("pods", "-l", selector)["items"], timeout=180,
             what="the release's pods gone", interval=2)  # fmt: skip
    left = rel.get("all,configmap,secret,serviceaccount,role,rolebinding,pdb,networkpolicy",
                   "-l", selector)["items"]  # fmt: skip
    assert left == [], [f"{o['kind']}/{o['metadata']['name']}" for o in left]
    cluster = rel.node.kubectl("get", "clusterrole,clusterrolebinding", "-l", selector,
                               "-o", "json")  # fmt: skip
    assert json.loads(cluster)["items"] == []
    # the broker and etcd PVCs stay with their data (as Strimzi and the Bitnami chart keep them)
    kept = {p["metadata"]["name"] for p in rel.get("pvc")["items"]}
    assert kept == pvcs, (kept, pvcs)

    rel.kubectl("delete", "pod", "toolbox", "--wait=true", "--timeout=120s", timeout=150)
    started = time.monotonic()
    rel.node.kubectl("delete", "namespace", NS, "--wait=false")

    def gone() -> bool:
        proc = rel.node.run("kubectl", "get", "namespace", NS, check=False)
        return proc.returncode != 0 and "NotFound" in proc.stderr

    wait_for(gone, timeout=NAMESPACE_GONE_S, what=f"namespace {NS} deleted", interval=2)
    print(f"uninstall: namespace deleted {time.monotonic() - started:.0f} s after the request")
    claims = json.loads(rel.node.kubectl("get", "pv", "-o", "json"))["items"]
    bound_here = [
        pv["metadata"]["name"] for pv in claims
        if (pv["spec"].get("claimRef") or {}).get("namespace") == NS
        and pv["status"]["phase"] == "Bound"
    ]  # fmt: skip
    assert bound_here == [], bound_here
