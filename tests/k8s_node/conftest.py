"""Fixtures of the single-node Kubernetes tests (run by ``make test-k8s-node``; need root).

``k8s_node``: the node of scripts/k8s/node.sh for the whole session. It reuses a node that is
already up (``make k8s-node``) and leaves it up; otherwise it brings one up and tears it down at
the end. Before yielding it checks that the clients it starts (through scripts/k8s/in-node) run
inside the node's network namespace. The parts are installed and built when the session collects
these tests (``pytest_collection_modifyitems``, outside every test's timeout): ~35 minutes cold
on 2 cores, about a second warm.
"""

from __future__ import annotations

import subprocess
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.k8s_node.diagnostics import collect
from tests.k8s_node.in_cluster import cluster  # noqa: F401 (the release `hw`, module-scoped)
from tests.k8s_node.node import Node

_build_error: list[BaseException] = []
#: the session's node while the fixture ``k8s_node`` holds it (for the report hook)
_live: list[Node] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    if any(here in Path(str(item.path)).parents for item in items):
        try:
            Node.from_script().build()
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            _build_error.append(exc)  # reported by every test of this folder, as an error


@pytest.fixture(scope="session")
def k8s_node() -> Iterator[Node]:
    if _build_error:
        raise RuntimeError(f"the node's parts could not be built: {_build_error[0]}")
    node = Node.from_script()
    started = not node.is_up()
    if started:
        node.up()
    try:
        node.check_clients_inside()
        _live.append(node)
        yield node
    finally:
        _live.clear()
        if started:
            node.down()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.when not in ("setup", "call") or not report.failed or not _live:
        return
    if "k8s_node" not in getattr(item, "fixturenames", ()):
        return
    ns = getattr(getattr(item, "module", None), "NS", None)
    try:
        text = collect(_live[0], [ns] if isinstance(ns, str) else None)
    except Exception as exc:  # the report must not be lost to its diagnostics
        text = f"collecting the node diagnostics failed: {type(exc).__name__}: {exc}"
    report.sections.append(("node diagnostics", text))
