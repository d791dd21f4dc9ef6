"""The repository has the layout the design card mandates, and what builds it refers only to
things that exist: the Dockerfiles' sources and stages, skaffold's build commands and inputs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

MANDATED = [
    "proto",
    "services/broker",
    "services/controller",
    "services/coordinator",
    "operator",
    "charts",
    "spark",
    "tests",
    "pyproject.toml",
    "skaffold.yaml",
]

pytestmark = pytest.mark.fast


def test_mandated_top_level_exists() -> None:
    missing = [p for p in MANDATED if not (ROOT / p).exists()]
    assert not missing, f"missing from the mandated layout: {missing}"


@pytest.mark.parametrize("folder", ["operator", "charts", "spark"])
def test_component_folders_have_a_readme_linking_into_docs(folder: str) -> None:
    readme = ROOT / folder / "README.md"
    assert readme.is_file(), f"{folder}/ has no README"
    # where the links lead is checked by tests/test_docs_links.py
    targets = re.findall(r"\]\(([^)#\s]+)", readme.read_text())
    assert any((readme.parent / t).resolve().parent == ROOT / "docs" for t in targets), targets


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    return [
        (m.group(1).upper(), m.group(2).strip())
        for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", text, re.M)
        if not m.group(0).lstrip().startswith("#")
    ]


DOCKERFILES = [ROOT / "Dockerfile", *sorted((ROOT / "images").glob("*.Dockerfile"))]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_dockerfile_builds_from_what_exists(dockerfile: Path) -> None:
    args: dict[str, str | None] = {}
    stages: set[str] = set()
    for op, rest in _instructions(dockerfile):
        if op == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default or None
        elif op == "FROM":
            words = rest.split()
            base = words[0]
            for var in re.findall(r"\$\{?(\w+)\}?", base):
                # a variable base must be a declared build argument with a default
                assert args.get(var), f"{dockerfile.name}: FROM {base} without ARG {var}=default"
            if len(words) == 3 and words[1].upper() == "AS":
                stages.add(words[2])
        elif op == "COPY":
            words = [w for w in rest.split() if not w.startswith("--")]
            from_stage = re.search(r"--from=(\S+)", rest)
            if from_stage:
                assert from_stage.group(1) in stages, f"{dockerfile.name}: {rest}"
                continue
            for source in words[:-1]:
                assert (ROOT / source).exists(), f"{dockerfile.name} copies missing {source}"


def test_skaffold_artifacts_build_with_commands_and_inputs_that_exist() -> None:
    config = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
    artifacts = config["build"]["artifacts"]
    assert {a["image"] for a in artifacts} == {"headwater", "headwater-operator", "headwater-etcd"}
    for artifact in artifacts:
        command = artifact["custom"]["buildCommand"].split()[0]
        assert os.access(ROOT / command, os.X_OK), f"{command} is not an executable script"
        for path in artifact["custom"]["dependencies"]["paths"]:
            assert (ROOT / path).exists(), f"skaffold watches missing {path}"
    # the docker profile swaps each artifact for a Dockerfile build
    dockerfiles = [
        (patch["value"].get("context", "."), patch["value"]["docker"]["dockerfile"])
        for profile in config.get("profiles", [])
        for patch in profile.get("patches", [])
        if isinstance(patch.get("value"), dict) and "docker" in patch["value"]
    ]
    assert len(dockerfiles) == len(artifacts)
    for context, dockerfile in dockerfiles:
        assert (ROOT / context / dockerfile) in DOCKERFILES, dockerfile
