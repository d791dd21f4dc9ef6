"""Headwater used as users use it, from inside the cluster (issue 16 item 4), against the
release ``hw`` in namespace ``headwater`` that ``make k8s-install`` puts on the test node:

- a Job produces 100,000 keyed records (acks=all) through the bootstrap Service
  ``hw-headwater-broker:9092`` to a 6-partition, RF 3 topic; another Job consumes them back as
  a consumer group; counts, distinct keys, per-partition counts and an order-independent
  SHA-256 of the (key, value) pairs match (the program: records_job.py, from a ConfigMap);
- ``kubectl apply`` of a Topic is reconciled by the operator's pod into a real topic with the
  requested partitions, replication factor and configs (checked through the admin API from a
  pod), a spec change adds partitions and changes configs, and deleting the resource deletes
  the topic;
- a ConsumerGroup resource shows the group's lag: what a group member committed against the
  end offsets, the same figures as the admin API's.

Every object the tests make carries the label ``headwater.dev/test=in-cluster-use`` and every
topic and group name starts with ``itest-incluster-``: leftovers of an interrupted run are removed
before the tests start, and each test removes its own in ``finally``. Pods request 20m CPU.
The produce/consume figures are printed (``pytest -s``) and recorded in docs/kubernetes.md.
"""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.wait import wait_for
from tests.k8s_node.node import Node, install_chart

NS = "headwater"
RELEASE = "hw"
BOOTSTRAP = "hw-headwater-broker:9092"  # the chart's bootstrap Service
LABEL_KEY, LABEL_VALUE = "headwater.dev/test", "in-cluster-use"
SELECTOR = f"{LABEL_KEY}={LABEL_VALUE}"
PREFIX = "itest-incluster-"
CLIENT_POD = "itest-incluster-client"
CONFIGMAP = "itest-incluster-records-job"
JOB_SCRIPT = Path(__file__).with_name("records_job.py")
RECORDS = 100_000
#: a Job's bound: 100,000 records took tens of seconds, under a load average of 10+ (the image
#: is already on the node, so the pod starts in seconds)
JOB_TIMEOUT_S = 15 * 60
#: the operator reconciles on a watch event (seconds), ConsumerGroup status every 15 s
OPERATOR_TIMEOUT_S = 180
KINDS = "jobs.batch,pods,configmaps,topics.headwater.dev,consumergroups.headwater.dev"
RESOURCES = {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}}
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
}
#: the module fixture (client pod) is set up within the first test's bound
pytestmark = pytest.mark.timeout(30 * 60)


def _labels() -> dict[str, str]:
    return {LABEL_KEY: LABEL_VALUE}


@dataclass
class InCluster:
    """Clients of the release ``hw``: kubectl through the node, Headwater's admin API through
    ``headwater`` run in a pod of the services image (``kubectl exec``)."""

    node: Node
    image: str

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120) -> str:
        return self.node.kubectl("-n", NS, *args, input=input, timeout=timeout)

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        out = self.kubectl("get", kind, name, "--ignore-not-found", "-o", "json")
        return json.loads(out) if out.strip() else None

    def wait_ready(self, kind: str, name: str) -> dict[str, Any]:
        """The custom resource once the operator has set Ready=True for its current
        generation (bounded wait)."""

        def ready() -> dict[str, Any] | None:
            res = self.get(kind, name)
            st = (res or {}).get("status") or {}
            cond = {c["type"]: c["status"] for c in st.get("conditions") or ()}
            if res is None or cond.get("Ready") != "True":
                return None
            return res if st.get("observedGeneration") == res["metadata"]["generation"] else None

        return wait_for(ready, timeout=OPERATOR_TIMEOUT_S, what=f"{kind} {name} Ready", interval=2)

    def headwater(self, *args: str, timeout: float = 120) -> Any:
        """``headwater --output json ARGS`` in the client pod; its parsed output."""
        out = self.kubectl(
            "exec", CLIENT_POD, "--",
            "headwater", "--bootstrap", BOOTSTRAP, "--output", "json", *args,
            timeout=timeout,
        )  # fmt: skip
        return json.loads(out) if out.strip() else None

    def sh(self, script: str, timeout: float = 300) -> str:
        """A shell script in the client pod (HEADWATER_BOOTSTRAP set); its stdout."""
        return self.kubectl(
            "exec", CLIENT_POD, "--", "env", f"HEADWATER_BOOTSTRAP={BOOTSTRAP}",
            "sh", "-c", script, timeout=timeout,
        )  # fmt: skip

    def events(self, name: str) -> dict[str, str]:
        """reason -> message of the events about the object ``name`` (they outlive it)."""
        out = self.kubectl(
            "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
        )
        return {e["reason"]: e["message"] for e in json.loads(out)["items"]}

    def topics(self) -> list[str]:
        return list(self.headwater("topics", "list"))

    def delete_topics(self, *names: str) -> None:
        present = [n for n in names if n in self.topics()]
        if present:
            self.headwater("topics", "delete", *present)

    def delete_labelled(self) -> None:
        """Every object the tests made (Topic resources: the operator deletes their topics)."""
        self.kubectl(
            "delete", KINDS, "-l", SELECTOR, "--ignore-not-found", "--wait=true",
            "--cascade=foreground", "--timeout=300s", timeout=360,
        )  # fmt: skip

    # ------------------------------------------------------------------ Jobs
    def job(self, name: str, args: list[str]) -> dict[str, Any]:
        """A Job running records_job.py ARGS in the services image (no retry: a second attempt
        would produce twice)."""
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": NS, "labels": _labels()},
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": JOB_TIMEOUT_S,
                "template": {
                    "metadata": {"labels": _labels()},
                    "spec": {
                        "restartPolicy": "Never",
                        "securityContext": POD_SECURITY,
                        "containers": [
                            {
                                "name": "records",
                                "image": self.image,
                                "imagePullPolicy": "Never",
                                "command": ["python", "/job/records_job.py", *args],
                                "resources": RESOURCES,
                                "securityContext": CONTAINER_SECURITY,
                                "volumeMounts": [
                                    {"name": "job", "mountPath": "/job", "readOnly": True}
                                ],
                            }
                        ],
                        "volumes": [{"name": "job", "configMap": {"name": CONFIGMAP}}],
                    },
                },
            },
        }

    def run_job(self, name: str, args: list[str]) -> dict[str, Any]:
        """Create the Job, wait (bounded) until it completes and return the report its pod left
        as termination message, with the Job's own start-to-completion time added."""
        self.apply(self.job(name, args))
        return self.wait_job(name)

    def wait_job(self, name: str) -> dict[str, Any]:
        """Wait (bounded) until the Job ``name`` completes; the report its pod left as
        termination message, with the Job's own start-to-completion time added."""

        def finished() -> dict[str, Any] | None:
            job = self.get("job", name)
            assert job is not None, f"job {name} vanished"
            st = job.get("status", {})
            return job if st.get("succeeded") or st.get("failed") else None

        job = wait_for(finished, timeout=JOB_TIMEOUT_S, what=f"job {name}", interval=3)
        pods = json.loads(self.kubectl("get", "pods", "-l", f"job-name={name}", "-o", "json"))
        (pod,) = pods["items"]
        (cs,) = pod["status"]["containerStatuses"]
        terminated = cs["state"].get("terminated") or {}
        if not job["status"].get("succeeded"):
            logs = self.kubectl("logs", f"job/{name}", "--tail=40")
            raise AssertionError(f"job {name} failed: {job['status']}\n{terminated}\n{logs}")
        report: dict[str, Any] = json.loads(terminated["message"])
        report["job_seconds"] = _seconds_between(
            job["status"]["startTime"], job["status"]["completionTime"]
        )
        print(f"{name}: {json.dumps(report, sort_keys=True)}")
        return report


def _seconds_between(start: str, end: str) -> int:
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    return int((datetime.strptime(end, fmt) - datetime.strptime(start, fmt)).total_seconds())


@pytest.fixture(scope="module")
def cluster(k8s_node: Node) -> Iterator[InCluster]:
    """The release ``hw`` Ready (installed by scripts/k8s/install-chart.sh when absent, as
    ``make k8s-install`` does), a client pod of its services image, no leftovers."""
    if k8s_node.run("helm", "status", RELEASE, "-n", NS, check=False).returncode != 0:
        install_chart()
    k8s_node.kubectl(
        "-n", NS, "wait", "pods", "-l", f"app.kubernetes.io/instance={RELEASE}",
        "--for=condition=Ready", "--timeout=300s", timeout=360,
    )  # fmt: skip
    # the services image the release runs (in the node's containerd, whatever images.json
    # names now: a later build is imported only by the next install)
    sts = json.loads(
        k8s_node.kubectl(
            "-n", NS, "get", "statefulset", f"{RELEASE}-headwater-broker", "-o", "json"
        )
    )
    image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
    c = InCluster(k8s_node, image)
    c.delete_labelled()
    try:
        c.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": CLIENT_POD, "namespace": NS, "labels": _labels()},
                "spec": {
                    "restartPolicy": "Never",
                    "activeDeadlineSeconds": 3600,  # should a run leave it behind
                    "terminationGracePeriodSeconds": 1,
                    "securityContext": POD_SECURITY,
                    "containers": [
                        {
                            "name": "client",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"],
                            "resources": RESOURCES,
                            "securityContext": CONTAINER_SECURITY,
                        }
                    ],
                },
            }
        )
        c.kubectl(
            "wait", f"pod/{CLIENT_POD}", "--for=condition=Ready", "--timeout=300s", timeout=360
        )
        c.delete_topics(*(t for t in c.topics() if t.startswith(PREFIX)))
        yield c
    finally:
        c.delete_labelled()


def _unique(what: str) -> str:
    return f"{PREFIX}{what}-{uuid.uuid4().hex[:6]}"


# ---------------------------------------------------------------------------- records Jobs
def test_a_job_produces_100000_keyed_records_another_consumes_them_as_a_group(
    cluster: InCluster,
) -> None:
    topic, group = _unique("records"), _unique("records")
    try:
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIGMAP, "namespace": NS, "labels": _labels()},
                "data": {"records_job.py": JOB_SCRIPT.read_text()},
            }
        )
        cluster.headwater(
            "topics", "create", topic, "--partitions", "6", "--replication-factor", "3",
            "--config", "min.insync.replicas=2",
        )  # fmt: skip
        (desc,) = cluster.headwater("topics", "describe", topic)
        assert [len(p["replicas"]) for p in desc["partitions"]] == [3] * 6, desc

        produced = cluster.run_job(
            "itest-incluster-produce",
            ["produce", "--bootstrap", BOOTSTRAP, "--topic", topic, "--count", str(RECORDS)],
        )
        assert produced["count"] == RECORDS and produced["distinct_keys"] == RECORDS, produced
        assert sum(produced["partitions"].values()) == RECORDS
        assert len(produced["partitions"]) == 6, "keys spread over every partition"

        consumed = cluster.run_job(
            "itest-incluster-consume",
            [
                "consume", "--bootstrap", BOOTSTRAP, "--topic", topic, "--group", group,
                "--count", str(RECORDS), "--partitions", "6",
            ],
        )  # fmt: skip
        for field in ("count", "distinct_keys", "sha256", "partitions"):
            assert consumed[field] == produced[field], (field, produced, consumed)
        assert consumed["committed"] == RECORDS, consumed

        # the group as the admin API sees it: empty, everything committed, no lag
        described = cluster.headwater("groups", "describe", group)
        assert described["state"] == "Empty" and described["total_lag"] == 0, described
        committed = {p["partition"]: p["committed"] for p in described["partitions"]}
        assert committed == {int(p): n for p, n in produced["partitions"].items()}, described
    finally:
        cluster.kubectl(
            "delete", "job", "itest-incluster-produce", "itest-incluster-consume",
            "--ignore-not-found", "--cascade=foreground", "--wait=true", timeout=180,
        )  # fmt: skip
        cluster.kubectl("delete", "configmap", CONFIGMAP, "--ignore-not-found")
        cluster.delete_topics(topic)


# ---------------------------------------------------------------------------- Topic resource
def _ready_reason(resource: dict[str, Any]) -> str | None:
    conditions = resource["status"].get("conditions") or ()
    return next((c.get("reason") for c in conditions if c["type"] == "Ready"), None)


def _topic_resource(name: str, partitions: int, config: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "headwater.dev/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name, "namespace": NS, "labels": _labels()},
        "spec": {"partitions": partitions, "replicationFactor": 3, "config": config},
    }


def test_a_topic_resource_becomes_a_topic_follows_its_spec_and_is_deleted_with_it(
    cluster: InCluster,
) -> None:
    name = _unique("topic")
    config = {"retention.ms": "3600000", "max.message.bytes": "262144"}
    try:
        cluster.apply(_topic_resource(name, 4, config))
        res = cluster.wait_ready("topic", name)
        assert res["status"]["partitions"] == 4 and res["status"]["topicId"], res["status"]
        # (the drift check, InSync, first runs a minute after the resource appeared)
        assert _ready_reason(res) == "Created", res["status"]
        assert "headwater.dev/finalizer" in res["metadata"]["finalizers"], res["metadata"]
        (desc,) = cluster.headwater("topics", "describe", name)
        assert desc["topic_id"] == res["status"]["topicId"]
        assert [len(p["replicas"]) for p in desc["partitions"]] == [3] * 4, desc
        assert {k: desc["configs"].get(k) for k in config} == config, desc["configs"]
        # the printer columns kubectl shows
        row = cluster.kubectl("get", "hwt", name, "--no-headers").split()
        assert row[:4] == [name, "4", "3", "True"], row

        # a spec change: more partitions, one config changed, one removed
        config2 = {"retention.ms": "7200000"}
        cluster.apply(_topic_resource(name, 6, config2))
        res = cluster.wait_ready("topic", name)
        assert res["status"]["partitions"] == 6, res["status"]
        (desc,) = cluster.headwater("topics", "describe", name)
        assert len(desc["partitions"]) == 6, desc
        assert desc["configs"].get("retention.ms") == "7200000", desc["configs"]
        assert "max.message.bytes" not in desc["configs"], desc["configs"]

        cluster.kubectl("delete", "topic", name, "--wait=true", "--timeout=180s", timeout=240)
        assert cluster.get("topic", name) is None
        wait_for(
            lambda: name not in cluster.topics(),
            timeout=OPERATOR_TIMEOUT_S,
            what=f"topic {name} deleted from Headwater",
            interval=2,
        )
        # by the operator's finalizer
        deleted = wait_for(
            lambda: cluster.events(name).get("Deleted"),
            timeout=OPERATOR_TIMEOUT_S,
            what=f"the operator's Deleted event of {name}",
            interval=2,
        )
        assert deleted == f"topic {name} deleted", deleted
    finally:
        cluster.kubectl(
            "delete", "topic", name, "--ignore-not-found", "--timeout=180s", timeout=240
        )
        cluster.delete_topics(name)


# ---------------------------------------------------------------------------- ConsumerGroup
def test_a_consumergroup_resource_shows_the_groups_lag(cluster: InCluster) -> None:
    topic, group = _unique("lag"), _unique("lag")
    resource = f"{PREFIX}lag"
    total, consumed = 1000, 600
    try:
        cluster.headwater(
            "topics", "create", topic, "--partitions", "3", "--replication-factor", "3"
        )
        cluster.sh(
            f"seq 1 {total} | sed 's/^/k/;s/$/:v/' | "
            f"headwater produce {shlex.quote(topic)} --acks all --key-separator :"
        )
        # the resource first: the group does not exist yet
        cluster.apply(
            {
                "apiVersion": "headwater.dev/v1alpha1",
                "kind": "ConsumerGroup",
                "metadata": {"name": resource, "namespace": NS, "labels": _labels()},
                "spec": {"groupId": group},
            }
        )
        res = cluster.wait_ready("consumergroup", resource)
        assert res["status"]["totalLag"] == 0 and res["status"]["partitions"] == [], res

        # a member reads 600 of the 1000 records, commits and leaves
        out = cluster.sh(
            f"headwater consume {shlex.quote(topic)} --group {shlex.quote(group)} "
            f"--from-beginning --max-messages {consumed} --timeout-ms 60000"
        )
        assert len(out.splitlines()) == consumed, out[-500:]

        def lag_is(expected: int) -> dict[str, Any] | None:
            r = cluster.get("consumergroup", resource)
            st = (r or {}).get("status") or {}
            return st if st.get("totalLag") == expected and st.get("state") == "Empty" else None

        status = wait_for(
            lambda: lag_is(total - consumed),
            timeout=OPERATOR_TIMEOUT_S,
            what=f"ConsumerGroup {resource} lag {total - consumed}",
            interval=2,
        )
        described = cluster.headwater("groups", "describe", group)
        by_partition = {
            p["partition"]: (p["committed"], p["end"], p["lag"]) for p in status["partitions"]
        }
        assert by_partition == {
            p["partition"]: (p["committed"], p["end"], p["lag"]) for p in described["partitions"]
        }, (status, described)
        assert sum(end for _, end, _ in by_partition.values()) == total, by_partition
        assert sum(c for c, _, _ in by_partition.values()) == consumed, by_partition
        assert status["members"] == 0
        row = cluster.kubectl("get", "hwcg", resource, "--no-headers").split()
        assert row[1:5] == [group, "Empty", "0", str(total - consumed)], row

        # the rest read: the status follows down to 0
        cluster.sh(
            f"headwater consume {shlex.quote(topic)} --group {shlex.quote(group)} "
            f"--max-messages {total - consumed} --timeout-ms 60000"
        )
        wait_for(
            lambda: lag_is(0),
            timeout=OPERATOR_TIMEOUT_S,
            what=f"ConsumerGroup {resource} lag 0",
            interval=2,
        )
    finally:
        cluster.kubectl("delete", "consumergroup", resource, "--ignore-not-found")
        cluster.delete_topics(topic)
