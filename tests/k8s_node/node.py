"""The single-node Kubernetes of scripts/k8s/node.sh, driven from the tests.

Everything the node runs lives in a private network namespace; its addresses (10.x) must never be
used from the host's namespace (packets to them would leave through the host's real interface).
So no test connects to the node itself: every client (kubectl, a pod's shell through
``kubectl exec``) is started through ``scripts/k8s/in-node``, and :meth:`Node.check_clients_inside`
proves that a process started that way is in the node's network namespace and that this one is
not, before the first client connects.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NODE_SH = REPO / "scripts" / "k8s" / "node.sh"
IN_NODE = REPO / "scripts" / "k8s" / "in-node"
IMPORT_IMAGES = REPO / "scripts" / "k8s" / "import-images"
INSTALL_CHART = REPO / "scripts" / "k8s" / "install-chart.sh"
#: install-chart.sh on a running node: image imports ~40 s, helm --wait ~25 s (under load more)
INSTALL_TIMEOUT_S = 15 * 60
#: cold: installs Debian packages and builds the Kubernetes commands and CoreDNS (~35 min on
#: 2 cores under load); warm: well under a second
BUILD_TIMEOUT_S = 90 * 60
#: bring-up of a built node (measured 30-60 s on 2 cores; the bound leaves room for load)
UP_TIMEOUT_S = 6 * 60
DOWN_TIMEOUT_S = 3 * 60


def _ns_id(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


@dataclass(frozen=True)
class Node:
    """Handle on the node; methods start processes, they never talk to the node directly."""

    netns: str
    kubeconfig: Path
    node_dir: Path
    bin_dir: Path

    @property
    def log(self) -> Path:
        """Where the output of node.sh goes (with the daemons' logs)."""
        return self.node_dir / "logs" / "node.sh.log"

    @classmethod
    def from_script(cls) -> Node:
        out = subprocess.run(
            ["bash", str(NODE_SH), "env"], check=True, capture_output=True, text=True
        ).stdout
        env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        env = {k: shlex.split(v)[0] for k, v in env.items()}
        return cls(
            netns=env["NETNS"],
            kubeconfig=Path(env["KUBECONFIG"]),
            node_dir=Path(env["NODE_DIR"]),
            bin_dir=Path(env["BIN"]),
        )

    # ------------------------------------------------------------------ lifecycle
    def _script(self, action: str, timeout: float) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as f:
            proc = subprocess.run(
                ["nice", "-n", "10", "bash", str(NODE_SH), action],
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        if proc.returncode != 0:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"node.sh {action} failed ({proc.returncode}):\n{tail}")

    def build(self) -> None:
        """Install and build the node's parts (idempotent; cached)."""
        self._script("build", BUILD_TIMEOUT_S)

    def up(self) -> None:
        self._script("up", UP_TIMEOUT_S)

    def down(self) -> None:
        self._script("down", DOWN_TIMEOUT_S)

    def is_up(self) -> bool:
        return subprocess.run(["bash", str(NODE_SH), "status"], timeout=60).returncode == 0

    # ------------------------------------------------------------------ clients
    def run(
        self, *argv: str, input: str | None = None, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a client inside the node's namespaces (scripts/k8s/in-node)."""
        proc = subprocess.run(
            [str(IN_NODE), *argv],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"in-node {shlex.join(argv)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
            )
        return proc

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120) -> str:
        return self.run("kubectl", *args, input=input, timeout=timeout).stdout

    def import_images(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """scripts/k8s/import-images ARGS (not checked: the caller looks at the outcome)."""
        return subprocess.run(
            [str(IMPORT_IMAGES), *args], capture_output=True, text=True, timeout=timeout
        )

    @property
    def node_images(self) -> Path:
        """The archives of the node's own images (pause, coredns, busybox)."""
        return self.bin_dir.parent / "node-images"

    def check_clients_inside(self) -> None:
        """Raise unless a client started by :meth:`run` is in the node's network namespace and
        this process is not (so nothing here may use the node's addresses directly)."""
        node_ns = _ns_id(f"/run/netns/{self.netns}")
        if _ns_id("/proc/self/ns/net") == node_ns:
            return  # the test process itself runs inside the node (in-node pytest ...)
        out = self.run("stat", "-L", "-c", "%d %i", "/proc/self/ns/net").stdout.split()
        client_ns = (int(out[0]), int(out[1]))
        if client_ns != node_ns:
            raise RuntimeError(
                f"a client started through in-node is in netns {client_ns}, not the node's "
                f"{self.netns} {node_ns}: refusing to connect"
            )

    # ------------------------------------------------------------------ what the node leaves
    def daemon_pids(self) -> dict[str, int]:
        pids = {}
        for f in sorted((self.node_dir / "pids").glob("*.pid")):
            pids[f.stem] = int(f.read_text().strip())
        return pids

    def netns_pids(self) -> list[int]:
        """Every process in the node's network namespace (daemons, shims, pods)."""
        out = subprocess.run(
            ["ip", "netns", "pids", self.netns], capture_output=True, text=True, check=True
        ).stdout
        return [int(p) for p in out.split()]

    def task_pids(self) -> list[int]:
        """The init process of every container containerd runs (pods' processes)."""
        state = self.node_dir / "containerd" / "state" / "io.containerd.runtime.v2.task"
        return [int(f.read_text().strip()) for f in state.glob("*/*/init.pid")]

    def kubepods_cgroups(self) -> list[Path]:
        """The cgroup directories kubelet creates for pods (node.sh notes the absent ones)."""
        path = self.node_dir / "state" / "cgroups"
        return [Path(line) for line in path.read_text().splitlines() if line]

    def saved_sysctls(self) -> dict[str, str]:
        path = self.node_dir / "state" / "sysctl.saved"
        return dict(line.split(" ", 1) for line in path.read_text().splitlines())


def install_chart(*args: str, release: str = "hw", namespace: str = "headwater") -> None:
    """scripts/k8s/install-chart.sh ARGS (``make k8s-install``: release ``hw`` in namespace
    ``headwater`` by default); AssertionError with its output when it fails."""
    proc = subprocess.run(
        ["nice", "-n", "10", "bash", str(INSTALL_CHART), *args],
        env={**os.environ, "RELEASE": release, "NAMESPACE": namespace},
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), None if it is gone:
    a PID reused by a new process has another start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def host_mounts_under(prefix: Path) -> list[str]:
    """Mount points in this (the host's) mount namespace at or under ``prefix``."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4]
        if mount_point == str(prefix) or mount_point.startswith(f"{prefix}/"):
            out.append(mount_point)
    return out
