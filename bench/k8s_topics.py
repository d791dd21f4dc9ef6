"""Operator scale (issue 9), one run, one machine, for docs/benchmarks.md.

Starts a local Headwater cluster (1 controller, 1 broker, 1 coordinator), a real
kube-apiserver with etcd (tests/k8s/apiserver.py; the binaries from scripts/k8s/build-tools.sh)
and ``python -m headwater_operator`` as a child process, then applies N Topic resources (one
partition each, in ``kubectl apply`` batches of 100) and measures:

* the time from the first apply until every resource has status Ready=True (read with
  ``kubectl get topics -o json`` once a second), and until Headwater lists every topic;
* the time until a spec change of every resource (partitions 1 -> 2) is reconciled;
* the time to delete them all (finalizers released, topics gone).

    python bench/k8s_topics.py [--topics 1000]   # prints JSON
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from headwater.client.sync import AdminClient
from headwater.dev.cluster import LocalCluster
from tests.k8s.apiserver import KubeApiServer, ensure_tools, tools_env
from tests.k8s.operator_helpers import CRDS, Kube, running_operator, topic

NS = "bench"
BATCH = 100


def wait_for(fn: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.monotonic()
    while not fn():
        if time.monotonic() - start > timeout:
            raise TimeoutError(what)
        time.sleep(1.0)
    return time.monotonic() - start


def topics_json(kube: Kube) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kube.run("get", "topics", "-o", "json", timeout=120))[
        "items"
    ]
    return items


def count_ready(kube: Kube, partitions: int) -> int:
    n = 0
    for obj in topics_json(kube):
        st = obj.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in st.get("conditions") or ()
        )
        if ready and st.get("partitions") == partitions:
            n += 1
    return n


def apply_all(kube: Kube, names: list[str], partitions: int) -> None:
    for i in range(0, len(names), BATCH):
        items = [topic(n, partitions=partitions) for n in names[i : i + BATCH]]
        kube.run(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            timeout=300,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    names = [f"bench-{i:05d}" for i in range(args.topics)]
    tools = ensure_tools()
    with tempfile.TemporaryDirectory(prefix="hw-k8s-bench-") as tmp:
        base = Path(tmp)
        api = KubeApiServer(base / "kube", tools)
        api.start()
        try:
            env = tools_env(tools, api.kubeconfig)
            subprocess.run(
                ["kubectl", "apply", "--server-side", "-f", str(CRDS)],
                check=True,
                env=env,
                capture_output=True,
            )
            subprocess.run(
                [
                    "kubectl",
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    "crd/topics.headwater.dev",
                ],
                check=True,
                env=env,
                capture_output=True,
            )
            kube = Kube(env, NS)
            kube.run("create", "namespace", NS)
            with (
                LocalCluster(
                    base / "hw",
                    brokers=1,
                    controllers=1,
                    coordinators=1,
                    etcd_unsafe_no_fsync=True,
                ) as hw,
                AdminClient(hw.bootstrap) as admin,
                running_operator(env, base / "operator.log", hw.bootstrap, "--namespace", NS),
            ):
                result: dict[str, Any] = {"topics": args.topics}
                start = time.monotonic()
                apply_all(kube, names, 1)
                result["apply_s"] = round(time.monotonic() - start, 1)
                wait_for(lambda: count_ready(kube, 1) >= args.topics, args.timeout, "ready")
                result["all_ready_s"] = round(time.monotonic() - start, 1)
                wait_for(
                    lambda: len(set(admin.list_topics()) & set(names)) == args.topics,
                    args.timeout,
                    "in headwater",
                )
                result["all_in_headwater_s"] = round(time.monotonic() - start, 1)

                start = time.monotonic()
                apply_all(kube, names, 2)
                wait_for(lambda: count_ready(kube, 2) >= args.topics, args.timeout, "grown")
                result["all_grown_to_2_partitions_s"] = round(time.monotonic() - start, 1)

                start = time.monotonic()
                kube.run("delete", "topics", "--all", "--wait=false", timeout=300)
                wait_for(lambda: not topics_json(kube), args.timeout, "deleted")
                result["all_deleted_s"] = round(time.monotonic() - start, 1)
                result["left_in_headwater"] = len(set(admin.list_topics()) & set(names))
                print(json.dumps(result, indent=2))
        finally:
            api.stop()


if __name__ == "__main__":
    main()
