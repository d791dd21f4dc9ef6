"""Fixtures of the Kubernetes tests: the tools and a real kube-apiserver (tests/k8s/apiserver.py).

``k8s_tools``: the directory holding kube-apiserver, kubectl and helm, built when a session
collects any test of this folder (in ``pytest_collection_modifyitems``, so outside every test's
timeout) by ``scripts/k8s/build-tools.sh``, cached under ~/.cache/headwater-k8s: a cold build
takes about 15 minutes on 2 cores, a warm check well under a second.

``kube_apiserver``: etcd + kube-apiserver on 127.0.0.1 (ports picked at run time) for the
whole session; yields the admin kubeconfig path (client certificate in ``system:masters``).
Use ``tools_env(k8s_tools, kube_apiserver)`` for a subprocess environment with the tools on
PATH and KUBECONFIG set.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.apiserver import KubeApiServer, ensure_tools

_build_error: list[BaseException] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    if any(here in Path(str(item.path)).parents for item in items):
        try:
            ensure_tools()
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            # reported by every test of this folder (an error, not a skip); other tests run
            _build_error.append(exc)


@pytest.fixture(scope="session")
def k8s_tools() -> Path:
    if _build_error:
        raise RuntimeError(f"the Kubernetes tools could not be built: {_build_error[0]}")
    return ensure_tools()


@pytest.fixture(scope="session")
def kube_apiserver(k8s_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    server = KubeApiServer(tmp_path_factory.mktemp("kube"), k8s_tools)
    server.start()
    try:
        yield server.kubeconfig
    finally:
        server.stop()
