"""A real Kubernetes API server for the tests: etcd + kube-apiserver on 127.0.0.1.

No kubelet, scheduler or controller-manager: objects are stored, validated, defaulted,
admitted and watched exactly as on a cluster, but no pod ever runs (a Deployment never gets
a ReplicaSet). That is what the chart and operator tests need: Helm installs and uninstalls
objects, kopf watches custom resources and patches their status.

The binaries (kube-apiserver, kubectl, helm) are built from the Go module proxy by
``scripts/k8s/build-tools.sh`` into ``~/.cache/headwater-k8s/<version>/bin`` (see
:func:`ensure_tools`); a cold build takes about 15 minutes on 2 cores, later runs find them.

Security: a CA made with :mod:`headwater.dev.tls` signs the server's certificate (SAN
127.0.0.1) and an admin client certificate in the group ``system:masters`` (RBAC allows it
everything); service-account tokens are signed with a generated EC key. The kubeconfig the
fixture yields carries that CA and that client certificate, nothing insecure.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from headwater.dev.etcd_server import EtcdServer
from headwater.dev.procs import ChildProcess, free_port, wait_until
from headwater.dev.tls import CertificateAuthority

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "k8s" / "build-tools.sh"
TOOLS = ("kube-apiserver", "kubectl", "helm")
#: a cold build of all three tools on 2 cores (measured ~15 min; the bound leaves room)
BUILD_TIMEOUT_S = 50 * 60


def tools_bin_dir() -> Path:
    """Where build-tools.sh puts (or has put) the binaries."""
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-bin"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def ensure_tools() -> Path:
    """The bin directory holding kube-apiserver, kubectl and helm, building what is missing
    (idempotent; a no-op taking well under a second when everything is there)."""
    bin_dir = tools_bin_dir()
    if all(os.access(bin_dir / t, os.X_OK) for t in TOOLS):
        return bin_dir
    log = bin_dir.parent / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        proc = subprocess.run(
            ["nice", "-n", "10", "bash", str(BUILD_SCRIPT)],
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            timeout=BUILD_TIMEOUT_S,
        )
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"scripts/k8s/build-tools.sh failed ({proc.returncode}):\n{tail}")
    return bin_dir


def tools_env(bin_dir: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    """os.environ with the tools first on PATH (and KUBECONFIG, Helm's dirs in the cache)."""
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
        home = kubeconfig.parent / "helm"
        env["HELM_CACHE_HOME"] = str(home / "cache")
        env["HELM_CONFIG_HOME"] = str(home / "config")
        env["HELM_DATA_HOME"] = str(home / "data")
    return env


class KubeApiServer:
    """etcd + kube-apiserver in ``base``; :meth:`start` returns once ``/readyz`` is ok."""

    def __init__(self, base: Path, bin_dir: Path) -> None:
        self.base = base
        self.bin_dir = bin_dir
        self.port = 0
        self.etcd = EtcdServer(
            base / "etcd-data", base / "etcd.log", name="kube-etcd", unsafe_no_fsync=True
        )
        self.proc: ChildProcess | None = None
        self.kubeconfig = base / "kubeconfig"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _pki(self) -> tuple[Path, Path, Path, Path, Path, Path, Path]:
        pki = self.base / "pki"
        ca = CertificateAuthority(pki, name="headwater-test kube CA")
        serving = ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default.svc"),
        )
        admin = ca.issue(
            "admin", common_name="headwater-test-admin", organization="system:masters", hosts=()
        )
        # kube-apiserver reads SEC1 ("EC PRIVATE KEY") for signing and the public key to verify
        sa_key, sa_pub = pki / "sa.key", pki / "sa.pub"
        key = ec.generate_private_key(ec.SECP256R1())
        sa_key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        sa_key.chmod(0o600)
        sa_pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return ca.cert_path, serving.cert, serving.key, admin.cert, admin.key, sa_key, sa_pub

    def start(self, timeout: float = 90.0) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        ca, cert, key, admin_cert, admin_key, sa_key, sa_pub = self._pki()
        self.etcd.start()
        self.port = free_port()
        argv = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://{self.etcd.endpoint}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
            f"--client-ca-file={ca}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # no controller-manager creates the "default" ServiceAccounts pods would need
            "--disable-admission-plugins=ServiceAccount",
            "--enable-priority-and-fairness=false",
            f"--cert-dir={self.base / 'certs'}",
            "--profiling=false",
            "--v=1",
        ]
        self.proc = ChildProcess("kube-apiserver", argv, self.base / "kube-apiserver.log")
        self.proc.start()
        self.kubeconfig.write_text(
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            f"- name: headwater-test\n  cluster:\n    server: {self.url}\n"
            f"    certificate-authority: {ca}\n"
            "users:\n"
            f"- name: admin\n  user:\n    client-certificate: {admin_cert}\n"
            f"    client-key: {admin_key}\n"
            "contexts:\n"
            "- name: headwater-test\n  context:\n    cluster: headwater-test\n"
            "    user: admin\n    namespace: default\n"
            "current-context: headwater-test\n"
        )
        self.kubeconfig.chmod(0o600)
        ctx = ssl.create_default_context(cafile=str(ca))
        ctx.load_cert_chain(str(admin_cert), str(admin_key))

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=ctx, timeout=2) as r:
                    return bool(r.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        try:
            wait_until(ready, timeout=timeout, what="kube-apiserver /readyz", watch=[self.proc])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=15)
        self.etcd.stop()
