"""The Helm chart's rendering for tests: the chart, its CI scenarios, ``helm template`` parsed
into objects, and lookups by kind and container (tests/k8s)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.k8s.apiserver import REPO, tools_env

CHART = REPO / "charts" / "headwater"
SCENARIOS = {
    "default": [],
    "tls": [CHART / "ci" / "tls-values.yaml"],
    "external-etcd": [CHART / "ci" / "external-etcd-values.yaml"],
    "full": [CHART / "ci" / "full-values.yaml"],
}


def run(argv: list[str], env: dict[str, str], *, check: bool = True, timeout: float = 120):
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def template(
    k8s_tools: Path, values: list[Path], *extra: str, namespace: str = "headwater"
) -> list[dict[str, Any]]:
    argv = [str(k8s_tools / "helm"), "template", "hw", str(CHART), "--namespace", namespace]
    argv += ["--include-crds", *extra]
    for v in values:
        argv += ["-f", str(v)]
    out = run(argv, tools_env(k8s_tools)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    spec = obj["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)
