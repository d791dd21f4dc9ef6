"""The release ``hw`` on the test node as a user in the cluster reaches it: the chart's
names, a client pod of the services image (:class:`InCluster`), and the module fixture
``cluster`` that test_in_cluster_use.py and test_spark_on_k8s.py share."""

from __future__ import annotations

import json
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


def labels() -> dict[str, str]:
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
        return job_manifest(
            name, self.image, "records", ["python", "/job/records_job.py", *args], RESOURCES
        )

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
        report["job_seconds"] = seconds_between(
            job["status"]["startTime"], job["status"]["completionTime"]
        )
        print(f"{name}: {json.dumps(report, sort_keys=True)}")
        return report


def seconds_between(start: str, end: str) -> int:
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
                "metadata": {"name": CLIENT_POD, "namespace": NS, "labels": labels()},
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


def unique_name(what: str) -> str:
    return f"{PREFIX}{what}-{uuid.uuid4().hex[:6]}"


def job_manifest(
    name: str,
    image: str,
    container: str,
    command: list[str],
    resources: dict[str, Any],
    scratch: str | None = None,
) -> dict[str, Any]:
    """A labelled Job of one container running COMMAND in IMAGE, never retried (a second
    attempt would produce twice), with the ConfigMap CONFIGMAP (the job programs) at /job and,
    when SCRATCH is a size, an emptyDir of that size at /tmp."""
    mounts: list[dict[str, Any]] = [{"name": "job", "mountPath": "/job", "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "job", "configMap": {"name": CONFIGMAP}}]
    if scratch is not None:
        mounts.append({"name": "tmp", "mountPath": "/tmp"})
        volumes.append({"name": "tmp", "emptyDir": {"sizeLimit": scratch}})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": labels()},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": JOB_TIMEOUT_S,
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": POD_SECURITY,
                    "containers": [
                        {
                            "name": container,
                            "image": image,
                            "imagePullPolicy": "Never",
                            "command": command,
                            "resources": resources,
                            "securityContext": CONTAINER_SECURITY,
                            "volumeMounts": mounts,
                        }
                    ],
                    "volumes": volumes,
                },
            },
        },
    }
