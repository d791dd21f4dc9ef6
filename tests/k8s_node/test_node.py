"""The single-node Kubernetes of scripts/k8s/node.sh: isolated, runs pods, resolves Services,
and leaves nothing behind when it goes down.

Every client runs inside the node's network namespace (``Node.run`` → scripts/k8s/in-node);
nothing here sends a packet to a node address from the host's namespace.
"""

from __future__ import annotations

import gzip
import ipaddress
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.wait import wait_for
from tests.k8s_node.node import Node, host_mounts_under, process_start_time
from tests.k8s_node.oci import docker_to_oci

#: the node's address ranges (scripts/k8s/node.sh): they exist only inside its netns
NODE_NETWORKS = [ipaddress.ip_network(n) for n in ("10.99.0.0/24", "10.88.0.0/16", "10.96.0.0/16")]
BUSYBOX = "localhost/headwater-node/busybox:1"

WEB_AND_CLIENT = f"""
apiVersion: v1
kind: Pod
metadata: {{name: web, labels: {{app: web}}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: {BUSYBOX}
    imagePullPolicy: Never
    command:
    - /bin/sh
    - -c
    - mkdir -p /w && echo hello-from-$(hostname) >/w/index.html && exec httpd -f -p 8080 -h /w
    ports: [{{containerPort: 8080}}]
    readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["/bin/sleep", "3600"]
"""


@pytest.fixture
def namespace(k8s_node: Node) -> Iterator[str]:
    name = f"node-test-{secrets.token_hex(3)}"
    k8s_node.kubectl("create", "namespace", name)
    # pods are refused until the namespace's default ServiceAccount exists
    wait_for(
        lambda: k8s_node.run("kubectl", "-n", name, "get", "sa", "default", check=False).returncode
        == 0,
        timeout=60,
        what=f"the default ServiceAccount of {name}",
        interval=0.5,
    )
    try:
        yield name
    finally:
        k8s_node.kubectl("delete", "namespace", name, "--wait=false")


def test_node_addresses_exist_only_inside_its_namespace(k8s_node: Node) -> None:
    # inside: the node's address, and the apiserver answers on it
    inside = k8s_node.run("ip", "-o", "-4", "addr", "show").stdout
    assert " 10.99.0.10/32 " in inside
    assert k8s_node.kubectl("get", "--raw", "/readyz").strip() == "ok"
    # the host: no interface joined to the node's netns, no route into the node's ranges
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True)
    assert f"link-netns {k8s_node.netns}" not in links.stdout
    routes = subprocess.run(
        ["ip", "-o", "-4", "route", "show", "table", "all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in routes.splitlines():
        words = line.split()
        dst = words[1] if words[0] in ("local", "broadcast", "unicast", "blackhole") else words[0]
        if dst == "default":
            continue
        net = ipaddress.ip_network(dst, strict=False)
        overlapping = [n for n in NODE_NETWORKS if net.overlaps(n)]
        assert not overlapping, f"host route {line!r} reaches the node's {overlapping}"


def test_pod_becomes_ready_and_a_service_resolves_through_coredns(
    k8s_node: Node, namespace: str
) -> None:
    k8s_node.kubectl("-n", namespace, "apply", "-f", "-", input=WEB_AND_CLIENT)
    k8s_node.kubectl(
        "-n", namespace, "wait", "--for=condition=Ready", "pod/web", "pod/client", "--timeout=120s"
    )
    cluster_ip = k8s_node.kubectl(
        "-n", namespace, "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"
    ).strip()
    assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network("10.96.0.0/16")
    fqdn = f"web.{namespace}.svc.cluster.local"

    def resolved() -> bool:
        out = k8s_node.run(
            "kubectl", "-n", namespace, "exec", "client", "--", "nslookup", fqdn, check=False
        ).stdout
        return f"Address: {cluster_ip}" in out

    # kube-proxy may still reject the DNS Service's address for a moment after CoreDNS is Ready
    wait_for(resolved, timeout=60, what=f"{fqdn} -> {cluster_ip} through CoreDNS", interval=1)

    # the short name through the pod's search path, and the Service forwarding to the pod
    def fetched() -> str | None:
        out = k8s_node.run(
            "kubectl",
            "-n",
            namespace,
            "exec",
            "client",
            "--",
            "sh",
            "-c",
            "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 5 nc web 80",
            check=False,
        ).stdout
        return out if "hello-from-web" in out else None

    assert "200 OK" in wait_for(fetched, timeout=60, what="GET http://web/ from client", interval=1)


def test_import_images_takes_docker_and_oci_archives(
    k8s_node: Node, namespace: str, tmp_path: Path
) -> None:
    docker = k8s_node.node_images / "busybox.tar"
    done = k8s_node.import_images(str(docker))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == BUSYBOX
    # an OCI archive naming its image by a bare tag (as umoci, buildah oci-archive:FILE:TAG do)
    tag = f"t{secrets.token_hex(4)}"
    tagged = tmp_path / "tagged.tar"
    docker_to_oci(docker, tagged, tag, gzip_layers=True)
    refused = k8s_node.import_images(str(tagged))
    assert refused.returncode == 1 and "--base-name" in refused.stderr
    done = k8s_node.import_images("--base-name", "localhost/headwater-test/oci", str(tagged))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == f"localhost/headwater-test/oci:{tag}"
    # a gzip-compressed OCI archive naming its image in full
    full = tmp_path / "full.tar"
    docker_to_oci(docker, full, f"localhost/headwater-test/full:{tag}", gzip_layers=False)
    compressed = tmp_path / "full.tar.gz"
    compressed.write_bytes(gzip.compress(full.read_bytes()))
    done = k8s_node.import_images(str(compressed))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == f"localhost/headwater-test/full:{tag}"
    # a pod runs each imported image
    for name, image in (
        ("oci", f"localhost/headwater-test/oci:{tag}"),
        ("full", f"localhost/headwater-test/full:{tag}"),
    ):
        k8s_node.kubectl(
            "-n",
            namespace,
            "run",
            name,
            f"--image={image}",
            "--image-pull-policy=Never",
            "--restart=Never",
            "--command",
            "--",
            "/bin/echo",
            f"ran-{name}",
        )
    k8s_node.kubectl(
        "-n",
        namespace,
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "pod/oci",
        "pod/full",
        "--timeout=120s",
    )
    for name in ("oci", "full"):
        assert k8s_node.kubectl("-n", namespace, "logs", name).strip() == f"ran-{name}"


def test_down_leaves_nothing_behind(k8s_node: Node) -> None:
    """Last in this module: takes the node down, checks, and brings it back up for the rest of
    the session (the session fixture then tears it down if it started it)."""
    pids = {p: process_start_time(p) for p in [*k8s_node.daemon_pids().values()]}
    pids |= {p: process_start_time(p) for p in k8s_node.netns_pids()}
    tasks = k8s_node.task_pids()
    assert tasks, "no container runs (CoreDNS should)"
    pids |= {p: process_start_time(p) for p in tasks}
    assert len(pids) >= 9, f"expected the node's daemons, shims and pods, found {pids}"
    sysctls = k8s_node.saved_sysctls()
    cgroups = k8s_node.kubepods_cgroups()
    assert any(c.is_dir() for c in cgroups), f"kubelet made none of {cgroups}"
    mnt_ns = k8s_node.node_dir / "ns" / "mnt"
    assert mnt_ns.exists() and host_mounts_under(k8s_node.node_dir)

    k8s_node.down()
    try:
        assert not Path(f"/run/netns/{k8s_node.netns}").exists()
        still = [p for p, start in pids.items() if start and process_start_time(p) == start]
        assert not still, f"processes of the node still running: {still}"
        assert host_mounts_under(k8s_node.node_dir) == []
        assert not mnt_ns.exists()
        for key, value in sysctls.items():
            assert Path(f"/proc/sys/{key}").read_text().strip() == value.strip(), key
        assert not (k8s_node.node_dir / "state" / "sysctl.saved").exists()
        assert [c for c in cgroups if c.exists()] == [], "kubelet's cgroups are left"
    finally:
        k8s_node.up()
    k8s_node.check_clients_inside()
