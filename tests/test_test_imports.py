"""Tests share code through tests/helpers (and the fixture modules beside them), never by
importing another test module: a test module imported elsewhere runs its module-level set-up
twice and ties two suites together (issue 18 item 5)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.fast


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and any(p.startswith("test_") for p in parts[1:])


def test_no_test_module_imports_another() -> None:
    offenders = {
        str(path.relative_to(TESTS)): sorted(
            n for n in _imported_modules(path) if _is_test_module(n)
        )
        for path in sorted(TESTS.rglob("*.py"))
        if not any(part.startswith(".") for part in path.relative_to(TESTS).parts)
    }
    offenders = {path: names for path, names in offenders.items() if names}
    assert not offenders, offenders


def test_the_check_sees_a_test_module_import(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text("from tests.k8s.test_chart import template\nimport tests.helpers.wait\n")
    assert {n for n in _imported_modules(probe) if _is_test_module(n)} == {
        "tests.k8s.test_chart",
        "tests.k8s.test_chart.template",
    }
