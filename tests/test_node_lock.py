"""tests/helpers/node_lock.py: a second run on the machine waits for the first's node lock,
with a bound, and gets it once the first lets go (by closing it or by exiting)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import node_lock

REPO = Path(__file__).resolve().parents[1]


def _other_run(path: Path, wait_s: float) -> subprocess.Popen[str]:
    """Another process taking the lock, as another pytest run's configuration does."""
    code = (
        "import sys, pathlib; from tests.helpers import node_lock; "
        f"node_lock.hold(pathlib.Path({str(path)!r}), wait_s={wait_s}, poll_s=0.05); "
        "print('held', flush=True)"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def test_a_second_holder_times_out_naming_the_first(tmp_path: Path) -> None:
    path = tmp_path / "node.tests.lock"
    held = node_lock.hold(path)
    try:
        proc = _other_run(path, wait_s=0.3)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode != 0 and out == "", (out, err)
        assert "TimeoutError" in err and f"by PID {os.getpid()}" in err, err
        assert "waiting (at most 0 s)" in err, err
    finally:
        held.close()


def test_a_waiting_holder_gets_the_lock_when_the_first_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "node.tests.lock"
    held = node_lock.hold(path)
    proc = _other_run(path, wait_s=60)
    try:
        assert proc.stderr is not None
        said = proc.stderr.readline()  # it says it waits before it waits
        assert "waiting (at most 60 s)" in said and str(path) in said, said
        assert proc.poll() is None  # still waiting while the lock is held
    finally:
        held.close()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out == "held\n", (out, err)
    # the exited holder released it: this process takes it at once and writes its PID
    again = node_lock.hold(path, wait_s=0)
    try:
        assert path.read_text() == f"{os.getpid()}\n"
    finally:
        again.close()


def test_a_run_of_the_node_tests_holds_the_lock_from_its_configuration(tmp_path: Path) -> None:
    """tests/conftest.py takes it when HEADWATER_TEST_IMAGES / HEADWATER_TEST_K8S_NODE is set,
    before collection (which builds the node's parts)."""
    node_dir = tmp_path / "node"
    held = node_lock.hold(node_lock.lock_path_for(str(node_dir)))
    try:
        env = {
            **os.environ,
            "HEADWATER_TEST_IMAGES": "1",
            "HEADWATER_K8S_NODE_DIR": str(node_dir),
            "HEADWATER_K8S_NODE_LOCK_WAIT_S": "0.2",
        }
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/images"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        held.close()
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "another run uses the machine's Kubernetes test node" in proc.stdout + proc.stderr
