"""``helm install`` of charts/headwater onto the test node (scripts/k8s/install-chart.sh): every
pod Ready, then a pod of the services image creates a topic, produces and consumes through the
bootstrap Service. Needs the images of scripts/k8s/build-images.sh (its images.json).

The client pod is not run with ``kubectl run --rm -i`` (which loses what a quickly failing pod
wrote): the test waits for it to finish and reads its log (``set -x``: which step failed);
it deletes the pod once it succeeded."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.wait import wait_for
from tests.k8s_node.node import Node, install_chart

NS = "headwater"  # the release hw's (conftest.py's diagnostics of a failure)
IMAGES_JSON = Path.home() / ".cache" / "headwater-k8s" / "images" / "out" / "images.json"
SMOKE = """
set -ex
B=hw-headwater-broker:9092
headwater --bootstrap $B topics create smoke --partitions 3 --replication-factor 3
printf 'k1:one\\nk2:two\\nk3:three\\n' | headwater --bootstrap $B produce smoke --acks all \\
  --key-separator :
headwater --bootstrap $B consume smoke --from-beginning --max-messages 3 --timeout-ms 30000 \\
  --print-key
"""


def test_helm_install_brings_every_pod_ready_and_a_pod_produces_and_consumes(
    k8s_node: Node,
) -> None:
    install_chart()
    k8s_node.kubectl("-n", NS, "delete", "pod", "smoke", "--ignore-not-found")  # a failed run's
    pods = json.loads(k8s_node.kubectl("-n", NS, "get", "pods", "-o", "json"))["items"]
    ready = {
        p["metadata"]["name"]: any(
            c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"]
        )
        for p in pods
    }
    # etcd, 2 controllers, 3 brokers, 2 coordinators, the operator
    assert len(ready) == 9 and all(ready.values()), ready
    image = json.loads(IMAGES_JSON.read_text())["headwater"]["ref"]
    k8s_node.kubectl(
        "-n", NS, "run", "smoke", "--restart=Never",
        f"--image={image}", "--image-pull-policy=Never", "--command", "--", "sh", "-c", SMOKE,
    )  # fmt: skip

    def finished() -> str | None:
        phase = k8s_node.kubectl(
            "-n", NS, "get", "pod", "smoke", "-o", "jsonpath={.status.phase}"
        ).strip()
        return phase if phase in ("Succeeded", "Failed") else None

    # a pod that fails or hangs stays for the failure's diagnostics (conftest.py)
    phase = wait_for(finished, timeout=180, what="the smoke pod to finish", interval=2)
    out = k8s_node.kubectl("-n", NS, "logs", "smoke")
    assert phase == "Succeeded", f"the smoke pod {phase}:\n{out}"
    k8s_node.kubectl("-n", NS, "delete", "pod", "smoke", "--wait=false")
    lines = [line.split() for line in out.splitlines() if line.startswith("k")]
    assert sorted(lines) == [["k1", "one"], ["k2", "two"], ["k3", "three"]], out
