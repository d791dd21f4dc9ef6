"""The client installs and runs without the server's dependencies (issue 18, "Layers").

A wheel is built from a copy of the source tree; a fresh venv receives it with ``--no-deps``
plus exactly the distributions its default (no-extra) requirements resolve to, taken from this
repository's venv (linked, not downloaded: no network), and ``pip check`` confirms nothing the
client declares is missing. Then, in that venv, tests/packaging/client_app.py creates a topic,
produces and consumes against a real local cluster this test starts, and reports that no
package of the ``server`` extra is installed or imported; the venv's ``headwater`` command
lists topics, and ``headwater dev`` says which extra it needs.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("client_app.py")
SOURCES = ["pyproject.toml", "README.md", "headwater", "services", "spark", "operator", "proto"]
#: the import names of the `server` extra's distributions (pyproject.toml)
SERVER_ONLY = ["prometheus_client", "cryptography", "grpc_health", "grpc_reflection"]
COUNT = 500


def _pip(*args: str | Path, timeout: float = 600) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"pip {args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.pyc")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    out = tmp / "dist"
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", out, src)
    (wheel,) = out.glob("headwater-*.whl")
    return wheel


def _default_requirements(wheel: Path) -> list[Requirement]:
    """The wheel's ``Requires-Dist`` entries that apply without any extra."""
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(meta).decode()
    env = {**default_environment(), "extra": ""}
    reqs = [
        Requirement(line.split(":", 1)[1].strip())
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(env)]


def _closure(reqs: list[Requirement]) -> dict[str, md.Distribution]:
    """The installed distributions ``reqs`` resolve to, transitively (this venv's)."""
    env = {**default_environment(), "extra": ""}
    found: dict[str, md.Distribution] = {}
    todo = list(reqs)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in found:
            continue
        dist = md.distribution(req.name)
        assert req.specifier.contains(dist.version, prereleases=True), (req, dist.version)
        found[name] = dist
        for line in dist.requires or []:
            sub = Requirement(line)
            if sub.marker is None or sub.marker.evaluate(env):
                todo.append(sub)
    return found


def _link_distributions(dists: dict[str, md.Distribution], site: Path) -> None:
    """Symlink each distribution's top-level entries (packages, modules, .libs, dist-info)
    into ``site``."""
    for dist in dists.values():
        root = Path(str(dist.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in sorted(tops):
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            target = site / top
            if not target.exists():
                target.symlink_to(root / top)


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv holding the Headwater wheel and only the client's requirements; yields
    its python."""
    tmp = tmp_path_factory.mktemp("client-only")
    wheel = _build_wheel(tmp)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    )
    reqs = _default_requirements(wheel)
    names = {canonicalize_name(r.name) for r in reqs}
    assert {"prometheus-client", "cryptography"}.isdisjoint(names), names
    _link_distributions(_closure(reqs), site)
    _pip("--python", python, "install", "--no-deps", "--no-index", wheel)
    _pip("--python", python, "check")  # every requirement of every installed distribution met
    yield python


def test_client_alone_produces_and_consumes(client_venv: Path, cluster: Any) -> None:
    """``cluster``: tests/conftest.py's local cluster (etcd, a controller, a broker)."""
    python = client_venv
    venv = python.parent.parent
    # the venv's own environment: nothing from this repository on the path (the app is run by
    # file name with safe-path on, from inside the venv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        [python, APP, cluster.bootstrap, "client-only", str(COUNT)],
        capture_output=True,
        text=True,
        cwd=venv,
        env={**env, "PYTHONSAFEPATH": "1"},
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["server_packages_installed"] == []
    assert report["server_modules_loaded_by_the_client"] == []
    assert report["platform_import_error"].startswith("ModuleNotFoundError"), report
    assert Path(report["headwater_file"]).is_relative_to(venv)
    assert report["values"] == sorted(f"value-{i}" for i in range(COUNT))

    # the CLI of the client-only install: client commands work, `headwater dev` names the extra
    cli = venv / "bin" / "headwater"
    listed = subprocess.run(
        [cli, "--bootstrap", cluster.bootstrap, "topics", "list"],
        capture_output=True,
        text=True,
        cwd=venv,
        env=env,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "client-only" in listed.stdout.split()
    dev = subprocess.run(
        [cli, "dev"], capture_output=True, text=True, cwd=venv, env=env, timeout=120
    )
    assert dev.returncode == 2, (dev.stdout, dev.stderr)
    assert "pip install 'headwater[local]'" in dev.stderr
