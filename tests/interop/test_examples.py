"""The examples a user copies (examples/go, examples/node; README "Clients in other
languages"): each runs as a new user would run it (`go run .`, `node main.js`) with the
bootstrap address of a real local cluster started here, produces ten keyed greetings and reads
them back as a member of the group "greeters". Run one after the other on the same topic and
group, the second finds the first's commits and reads only its own ten records."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from interop_util import client_cluster, npm_ci

from headwater.client import AdminClient
from headwater.dev.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^greetings-(\d)@(\d+) user-(\d): hello (\d)$")


@pytest.fixture(scope="module")
def examples_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    npm_ci(ROOT / "clients" / "node")
    with client_cluster(tmp_path_factory.mktemp("examples-cluster"), brokers=1) as c:
        yield c


def run_example(command: list[str], cwd: Path, env: dict[str, str]) -> list[tuple[int, ...]]:
    """Run an example; assert it succeeded; its lines as (partition, offset, user, n)."""
    proc = subprocess.run(
        ["nice", "-n", "15", *command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{command} failed:\n{output}"
    lines = proc.stdout.splitlines()
    parsed = [m.groups() for m in map(LINE.match, lines) if m]
    assert len(parsed) == len(lines), lines
    return [tuple(int(g) for g in groups) for groups in parsed]


def test_the_go_and_node_examples_produce_and_consume_as_a_group(
    examples_cluster: LocalCluster,
) -> None:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=readonly", CGO_ENABLED="0")
    bootstrap = examples_cluster.bootstrap
    offsets: set[tuple[int, int]] = set()
    for command, cwd in (
        ([go, "run", ".", bootstrap], ROOT / "examples" / "go"),
        (["node", "main.js", bootstrap], ROOT / "examples" / "node"),
    ):
        seen = run_example(command, cwd, env)
        # the ten greetings this run produced, each once, where the partitioner put them;
        # nothing of the earlier run (its commits hold)
        assert sorted(n for _, _, _, n in seen) == list(range(10)), seen
        assert all(user == n for _, _, user, n in seen)
        here = {(p, o) for p, o, _, _ in seen}
        assert len(here) == 10 and not here & offsets, (seen, offsets)
        offsets |= here
    with AdminClient(bootstrap) as admin:
        assert "greetings" in admin.list_topics()
