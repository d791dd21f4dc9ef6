"""proto/ is guarded: scripts/tools/buf.sh (run by `make lint`) passes on this tree, and in a
scratch clone of proto/ it refuses a commit that removes a field without reserving its number
and name, or that gives a field number another name; reserving both makes the removal pass.

buf comes once per version from scripts/tools/go-tool.sh (npm's release binary in ~30 s on
Linux, else a build of about 8 min of one core; `make lint`, which CI runs first, has normally
fetched it already)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIELD = "  string client_id = 10;\n"  # FetchRequest's last field
RESERVED = '  reserved 10;\n  reserved "client_id";\n'


@pytest.fixture(scope="module")
def buf() -> str:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/tools/go-tool.sh"), "buf"],
        capture_output=True,
        text=True,
        timeout=3000,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def _check(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/tools/buf.sh"], cwd=repo, capture_output=True, text=True, timeout=600
    )


def test_this_tree_passes(buf: str) -> None:
    out = _check(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_removed_or_renamed_fields_are_refused(buf: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(ROOT / "proto", repo / "proto")
    shutil.copytree(ROOT / "scripts/tools", repo / "scripts/tools")
    shutil.copy(ROOT / "buf.yaml", repo / "buf.yaml")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    broker = repo / "proto/headwater/v1/broker.proto"
    base = broker.read_text()
    assert base.count(FIELD) == 1

    def commit(text: str) -> subprocess.CompletedProcess[str]:
        broker.write_text(text)
        _git(repo, "commit", "-qam", "change")
        out = _check(repo)
        _git(repo, "reset", "-q", "--hard", "HEAD^")  # back to the base for the next case
        return out

    removed = commit(base.replace(FIELD, ""))
    assert removed.returncode != 0
    assert 'deleted without reserving the number "10"' in removed.stdout + removed.stderr
    renamed = commit(base.replace(FIELD, "  string client_name = 10;\n"))
    assert renamed.returncode != 0
    assert "client_name" in renamed.stdout + renamed.stderr
    reserved = commit(base.replace(FIELD, RESERVED))
    assert reserved.returncode == 0, reserved.stdout + reserved.stderr
    assert "buf breaking against" in reserved.stdout
