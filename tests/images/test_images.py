"""The images of scripts/k8s/build-images.sh, checked on the host (no Kubernetes, no network).

* every archive is a valid OCI image layout: index, manifest, config and layers whose sha256
  and size match their descriptors, and whose uncompressed digests are the config's diff_ids;
  the index names the image for containerd (``io.containerd.image.name``);
* the configurations run what the Dockerfiles and the chart run (uid 10001, the services
  image's CMD, the operator's and etcd's ENTRYPOINT);
* containerd imports each archive under the printed reference (a private containerd);
* the images work: each is unpacked with ``umoci unpack`` and its program runs chrooted in it,
  in fresh network, mount and PID namespaces (loopback only);
* the layers are cached: a Python-only change of the sources rebuilds only the top layer, and a
  second build with nothing changed gives the same images.

Run by ``make test-images`` (HEADWATER_TEST_IMAGES=1; conftest.py), which builds the images
first (``make images``); the fixture runs the build script again, which is then a no-op.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "scripts" / "k8s" / "build-images.sh"
#: the chart's images: unpacked and run here, imported by a private containerd
NAMES = ("headwater", "headwater-operator", "etcd")
#: built by default too; checked here for its layers and configuration only: the node's
#: tests/k8s_node/test_spark_on_k8s.py imports it and runs a Spark job in it, so unpacking
#: and importing its 684 MiB here again would only add minutes to CI
SPARK = "headwater-spark"
# what the Headwater wheel is built from (scripts/k8s/build_images.py SOURCES)
SOURCES = ("pyproject.toml", "README.md", "proto", "headwater", "services", "spark", "operator")
# a cold build downloads Debian packages and wheels: generous bounds, not timing checks
BUILD_TIMEOUT = 3600
# the session fixture's build counts against the first test's timeout
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT + 600)


def build(*args: str) -> dict[str, dict[str, str]]:
    """Run the build script; {name: {ref, archive}} from its output lines."""
    proc = subprocess.run(
        ["nice", "-n", "15", str(BUILD), *args],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = {}
    for line in proc.stdout.splitlines():
        name, ref, archive, _size = line.split()
        out[name] = {"ref": ref, "archive": archive}
    return out


@pytest.fixture(scope="session")
def images() -> dict[str, dict[str, str]]:
    built = build()
    assert set(built) == {*NAMES, SPARK}
    return built


class OciArchive:
    """An OCI image layout archive, read with the standard library only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with tarfile.open(path) as tar:
            self.members = {m.name: m for m in tar.getmembers()}
            self.layout = json.load(tar.extractfile("oci-layout"))  # type: ignore[arg-type]
            self.index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]

    def blob(self, digest: str) -> bytes:
        algo, hexd = digest.split(":")
        with tarfile.open(self.path) as tar:
            f = tar.extractfile(f"blobs/{algo}/{hexd}")
            assert f is not None, f"{digest} missing"
            return f.read()

    def checked_blob(self, descriptor: dict[str, Any]) -> bytes:
        data = self.blob(descriptor["digest"])
        assert len(data) == descriptor["size"], descriptor
        assert "sha256:" + hashlib.sha256(data).hexdigest() == descriptor["digest"]
        return data

    def manifest(self) -> dict[str, Any]:
        (desc,) = self.index["manifests"]
        assert desc["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
        return json.loads(self.checked_blob(desc))

    def config(self) -> dict[str, Any]:
        return json.loads(self.checked_blob(self.manifest()["config"]))


@pytest.mark.parametrize("name", NAMES)
def test_archive_is_valid_oci(images: dict[str, dict[str, str]], name: str) -> None:
    archive = OciArchive(Path(images[name]["archive"]))
    assert archive.layout == {"imageLayoutVersion": "1.0.0"}
    assert archive.index["schemaVersion"] == 2
    (desc,) = archive.index["manifests"]
    ref = images[name]["ref"]
    assert desc["annotations"]["io.containerd.image.name"] == ref
    assert desc["annotations"]["org.opencontainers.image.ref.name"] == ref.rsplit(":", 1)[1]
    manifest = archive.manifest()
    assert manifest["schemaVersion"] == 2
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    config = archive.config()
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert config["rootfs"]["type"] == "layers"
    diff_ids = []
    for layer in manifest["layers"]:
        assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
        data = gzip.decompress(archive.checked_blob(layer))
        diff_ids.append("sha256:" + hashlib.sha256(data).hexdigest())
        # a whole tar stream: every member's data and the end-of-archive blocks are there
        assert len(data) % 512 == 0, f"{layer['digest']}: truncated tar"
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            assert tar.getmembers()
    assert config["rootfs"]["diff_ids"] == diff_ids
    # every blob in the archive is one the manifest names, and nothing else is in it
    named = {manifest["config"]["digest"], desc["digest"]} | {
        layer["digest"] for layer in manifest["layers"]
    }
    blobs = {
        n.replace("blobs/sha256/", "sha256:") for n in archive.members if n.startswith("blobs/")
    }
    assert blobs == named
    assert set(archive.members) == {"oci-layout", "index.json"} | {
        "blobs/sha256/" + d.split(":")[1] for d in named
    }


def test_layers_are_shared(images: dict[str, dict[str, str]]) -> None:
    """The base layer is the same blob in every image, the dependency layer in the services,
    operator and Spark images."""
    layers = {
        name: [x["digest"] for x in OciArchive(Path(images[name]["archive"])).manifest()["layers"]]
        for name in (*NAMES, SPARK)
    }
    assert len(layers["headwater"]) == 4  # base, deps, server deps, app
    assert len(layers["headwater-operator"]) == 4  # base, deps, operator deps, app
    assert layers["headwater-operator"][:2] == layers["headwater"][:2]
    assert len(layers["etcd"]) == 2  # base, etcd-server
    assert layers["etcd"][0] == layers["headwater"][0]
    assert len(layers["headwater-spark"]) == 5  # base, deps, pyspark, Java runtime, app
    assert layers["headwater-spark"][:2] == layers["headwater"][:2]


def test_configs_run_the_expected_programs(images: dict[str, dict[str, str]]) -> None:
    configs = {
        n: OciArchive(Path(images[n]["archive"])).config()["config"] for n in (*NAMES, SPARK)
    }
    services = configs["headwater"]
    # as the Dockerfile: the chart's command picks the service; no ENTRYPOINT to override
    assert not services.get("Entrypoint")
    assert services["Cmd"] == ["python", "-m", "services.broker", "--help"]
    assert services["User"] == "10001:10001"
    assert services["WorkingDir"] == "/var/lib/headwater"
    assert "/var/lib/headwater" in services["Volumes"]
    env = dict(e.split("=", 1) for e in services["Env"])
    assert "glibc.malloc.arena_max=2" in env["GLIBC_TUNABLES"]
    assert env["PYTHONUNBUFFERED"] == "1"
    assert {"9092/tcp", "9093/tcp", "9094/tcp", "9100/tcp"} <= set(services["ExposedPorts"])
    operator = configs["headwater-operator"]
    assert operator["Entrypoint"] == ["python", "-m", "headwater_operator"]
    assert operator["User"] == "10001:10001"
    etcd = configs["etcd"]
    assert etcd["Entrypoint"] == ["/usr/local/bin/etcd"]  # what charts/headwater runs
    assert etcd["User"] == "10001:10001"
    spark = configs[SPARK]
    assert spark["User"] == "10001:10001"
    env = dict(e.split("=", 1) for e in spark["Env"])
    assert env["JAVA_HOME"] == "/usr/lib/jvm/java-17-openjdk-amd64"
    assert env["HOME"] == "/tmp"  # a pod mounts a writable volume there


def unpack(archive: Path, dest: Path) -> Path:
    """The image's root filesystem, unpacked by umoci from the archive's layout."""
    layout = dest / "layout"
    layout.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    tag = OciArchive(archive).index["manifests"][0]["annotations"][
        "org.opencontainers.image.ref.name"
    ]
    subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{tag}", str(dest / "bundle")],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return dest / "bundle" / "rootfs"


def run_in(
    rootfs: Path, config: dict[str, Any], argv: list[str]
) -> subprocess.CompletedProcess[str]:
    """``argv`` chrooted in ``rootfs`` as the image's user with the image's environment, in new
    network (loopback only), mount and PID namespaces; /dev and /proc mounted privately."""
    script = (
        "set -e\n"
        f"mount --rbind /dev {rootfs}/dev\n"
        f"mount -t proc proc {rootfs}/proc\n"
        f'exec chroot --userspec={config["User"]} {rootfs} "$@"\n'
    )
    workdir = config.get("WorkingDir") or "/"
    env = dict(e.split("=", 1) for e in config["Env"])
    cmd = [
        "env",
        "-i",
        *(f"{k}={v}" for k, v in env.items()),
        "sh",
        "-c",
        f'cd {workdir} && exec "$@"',
        "sh",
        *argv,
    ]
    return subprocess.run(
        ["unshare", "--net", "--mount", "--pid", "--fork", "sh", "-c", script, "sh", *cmd],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def rootfs(
    images: dict[str, dict[str, str]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    """Each image unpacked (about 0.5 GB each), removed after the module's tests."""
    dirs = {n: tmp_path_factory.mktemp(n) for n in NAMES}
    try:
        yield {n: unpack(Path(images[n]["archive"]), dirs[n]) for n in NAMES}
    finally:
        for d in dirs.values():
            shutil.rmtree(d, ignore_errors=True)


def config_of(images: dict[str, dict[str, str]], name: str) -> dict[str, Any]:
    return OciArchive(Path(images[name]["archive"])).config()["config"]


def test_services_image_runs_the_services(
    images: dict[str, dict[str, str]], rootfs: dict[str, Path]
) -> None:
    config = config_of(images, "headwater")
    for service in ("broker", "controller", "coordinator"):
        proc = run_in(
            rootfs["headwater"], config, ["python", "-m", f"services.{service}", "--help"]
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "--etcd" in proc.stdout, proc.stdout
    probe = (
        "import os, socket, sys, grpc, numpy, pyarrow, headwater\n"
        "print(sys.version_info[:2], os.getuid(), os.getcwd(), sys.executable)\n"
        "print(sorted(name for _, name in socket.if_nameindex()))\n"
        "print(headwater.__file__)\n"
    )
    proc = run_in(rootfs["headwater"], config, ["python", "-c", probe])
    assert proc.returncode == 0, proc.stderr[-2000:]
    version, netifs, location = proc.stdout.splitlines()
    assert version == "(3, 11) 10001 /var/lib/headwater /usr/bin/python"
    assert netifs == "['lo']"  # no network but loopback
    assert location.startswith("/usr/local/lib/python3.11/dist-packages/headwater/")
    proc = run_in(rootfs["headwater"], config, ["headwater", "--help"])
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_operator_and_etcd_images_run(
    images: dict[str, dict[str, str]], rootfs: dict[str, Path]
) -> None:
    config = config_of(images, "headwater-operator")
    proc = run_in(rootfs["headwater-operator"], config, [*config["Entrypoint"], *config["Cmd"]])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower()
    config = config_of(images, "etcd")
    proc = run_in(rootfs["etcd"], config, [*config["Entrypoint"], "--version"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("etcd Version: 3."), proc.stdout


def test_python_change_rebuilds_only_the_top_layer(
    images: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    """A copy of the sources with one Python file changed: same base and dependency layers,
    a new top layer holding the change; the unchanged sources give the same image again."""
    src = tmp_path / "src"
    src.mkdir()
    for top in SOURCES:
        if (REPO / top).is_dir():
            shutil.copytree(REPO / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / top, src / top)
    marker = "IMAGE_TEST_MARKER = 1\n"
    with (src / "services" / "broker" / "__main__.py").open("a") as f:
        f.write(marker)
    out = tmp_path / "out"
    changed = build(
        "--source", str(src), "--out", str(out), "--ref", "localhost/t/hw:x", "headwater"
    )["headwater"]
    before = OciArchive(Path(images["headwater"]["archive"])).manifest()["layers"]
    after_archive = OciArchive(Path(changed["archive"]))
    after = after_archive.manifest()["layers"]
    # base, dependencies, server dependencies: the same; the application layer on top: new
    assert len(after) == len(before)
    assert [x["digest"] for x in after[:-1]] == [x["digest"] for x in before[:-1]]
    assert after[-1]["digest"] != before[-1]["digest"]
    top_layer = gzip.decompress(after_archive.blob(after[-1]["digest"]))
    with tarfile.open(fileobj=io.BytesIO(top_layer)) as layer:
        names = layer.getnames()
        (main,) = [n for n in names if n.endswith("dist-packages/services/broker/__main__.py")]
        text = layer.extractfile(main).read().decode()  # type: ignore[union-attr]
    assert text.endswith(marker)
    assert not any("/numpy/" in n for n in names)  # dependencies stay in their layer
    again = build()
    assert {n: again[n]["ref"] for n in (*NAMES, SPARK)} == {
        n: images[n]["ref"] for n in (*NAMES, SPARK)
    }
    assert os.path.getsize(again["headwater"]["archive"]) > 0


def test_containerd_imports_the_archives(images: dict[str, dict[str, str]], tmp_path: Path) -> None:
    """``ctr -n k8s.io images import`` (what the node's import step runs) accepts each archive
    and names the image by the reference the build printed. containerd runs privately: its own
    root, state and socket under tmp_path, in a new network namespace, stopped by PID."""
    sock = tmp_path / "containerd.sock"
    config = tmp_path / "config.toml"
    config.write_text(
        "version = 2\n"
        f'root = "{tmp_path}/root"\n'
        f'state = "{tmp_path}/state"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{sock}"\n'
        f'[ttrpc]\n  address = "{tmp_path}/containerd.ttrpc.sock"\n'
        '[debug]\n  address = ""\n[metrics]\n  address = ""\n'
    )
    log = (tmp_path / "containerd.log").open("w")
    daemon = subprocess.Popen(
        ["unshare", "--net", "containerd", "--config", str(config)], stdout=log, stderr=log
    )
    try:
        ctr = ["ctr", "--address", str(sock), "-n", "k8s.io"]

        def serving() -> bool:
            assert daemon.poll() is None, (tmp_path / "containerd.log").read_text()[-2000:]
            probe = subprocess.run([*ctr, "version"], capture_output=True, timeout=30)
            return probe.returncode == 0

        wait_for(serving, timeout=60, what="containerd serving", interval=0.2)
        for name in NAMES:
            proc = subprocess.run(
                [*ctr, "images", "import", "--no-unpack", images[name]["archive"]],
                capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
        listed = subprocess.run(
            [*ctr, "images", "ls", "--quiet"], capture_output=True, text=True, timeout=60
        )
        assert set(listed.stdout.split()) == {images[n]["ref"] for n in NAMES}
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=30)
        log.close()
