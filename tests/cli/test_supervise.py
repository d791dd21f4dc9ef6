"""headwater.dev.supervise with small real child processes and a fake clock: how a death is
reported, when restarts happen (capped exponential backoff, reset after a long enough run),
``--no-restart``, and the ports a restarted service keeps."""

from __future__ import annotations

import io
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.dev.procs import ChildProcess
from headwater.dev.supervise import Backoff, Supervised, Supervisor, describe_exit, pin_ports
from tests.helpers.wait import wait_for

CRASH = "print('starting'); print('boom: disk on fire'); import sys; sys.exit(3)"
STAY = "import time; print('staying-up', flush=True); time.sleep(120)"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Child:
    """A Supervised child whose next run executes ``code`` (a Python snippet)."""

    def __init__(self, tmp: Path, code: str) -> None:
        self.code = code
        self.log = tmp / "child.log"
        self.runs: list[ChildProcess] = []
        self.start()

    def start(self) -> None:
        child = ChildProcess("child", [sys.executable, "-c", self.code], self.log)
        child.start()
        self.runs.append(child)

    def current(self) -> ChildProcess:
        return self.runs[-1]

    def exited(self) -> bool:
        return not self.current().alive()

    def supervised(self) -> Supervised:
        return Supervised("child-1", self.current, self.start)


@pytest.fixture
def children(tmp_path: Path) -> Iterator[list[Child]]:
    made: list[Child] = []
    yield made
    for c in made:
        for run in c.runs:
            run.stop(5)


def _supervisor(child: Child, clock: Clock, out: io.StringIO, restart: bool = True) -> Supervisor:
    policy = Backoff(initial=1.0, cap=4.0, reset_after=60.0)
    return Supervisor([child.supervised()], policy=policy, out=out, clock=clock, restart=restart)


def test_backoff_doubles_up_to_the_cap() -> None:
    b = Backoff(initial=1.0, cap=30.0)
    assert [b.delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_describe_exit() -> None:
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-signal.SIGKILL) == "killed by signal SIGKILL"
    assert describe_exit(-signal.SIGSEGV) == "killed by signal SIGSEGV"


def test_death_is_reported_and_restarts_back_off(tmp_path: Path, children: list[Child]) -> None:
    child = Child(tmp_path, CRASH)
    children.append(child)
    clock, out = Clock(), io.StringIO()
    sup = _supervisor(child, clock, out)
    wait_for(child.exited, timeout=30, what="the first run to exit")
    assert sup.poll()
    first_pid = child.runs[0].pid
    text = out.getvalue()
    assert f"child-1 (pid {first_pid}) died: exit code 3; last lines of {child.log}:" in text
    assert "    | boom: disk on fire" in text and "    | starting" in text
    assert "restarting child-1 in 1.0s (restart 1 in a row" in text

    delays = []
    for n in range(1, 5):
        runs = len(child.runs)
        wait_time = sup.policy.delay(n)
        clock.now += wait_time - 0.5
        assert sup.poll() and len(child.runs) == runs, "restarted before its delay"
        clock.now += 0.5
        assert sup.poll() and len(child.runs) == runs + 1
        assert f"child-1 restarted (pid {child.current().pid})" in out.getvalue()
        wait_for(child.exited, timeout=30, what="the restarted run to exit")
        assert sup.poll()
        restart_at = sup.children[0].restart_at
        assert restart_at is not None
        delays.append(restart_at - clock.now)
    assert delays == [2.0, 4.0, 4.0, 4.0]  # doubling, capped at 4 s
    assert len({r.pid for r in child.runs}) == len(child.runs)


def test_failure_count_resets_after_a_long_run(tmp_path: Path, children: list[Child]) -> None:
    child = Child(tmp_path, CRASH)
    children.append(child)
    clock, out = Clock(), io.StringIO()
    sup = _supervisor(child, clock, out)
    for _ in range(3):  # three failed runs in a row: the next delay would be 4 s
        wait_for(child.exited, timeout=30, what="a run to exit")
        sup.poll()
        clock.now = sup.children[0].restart_at or clock.now
        if len(child.runs) == 3:
            child.code = STAY
        sup.poll()
    assert sup.children[0].failures == 3
    wait_for(
        lambda: "staying-up" in child.log.read_text(), timeout=30, what="the long run to start"
    )
    clock.now += 60.0
    assert sup.poll() and sup.children[0].failures == 0
    child.current().kill9()
    assert sup.poll()
    assert sup.children[0].restart_at == clock.now + 1.0
    assert "killed by signal SIGKILL" in out.getvalue()


def test_no_restart_reports_and_asks_to_stop(tmp_path: Path, children: list[Child]) -> None:
    child = Child(tmp_path, CRASH)
    children.append(child)
    out = io.StringIO()
    sup = _supervisor(child, Clock(), out, restart=False)
    assert sup.poll()  # alive or not yet noticed: nothing to do
    wait_for(child.exited, timeout=30, what="the run to exit")
    assert not sup.poll()
    assert len(child.runs) == 1
    assert "died: exit code 3" in out.getvalue()
    assert "--no-restart is set: stopping the cluster" in out.getvalue()


def test_pin_ports_keeps_the_first_run_ports() -> None:
    argv = ["python", "-m", "services.broker", "--port", "0", "--metrics-port", "0", "--x", "1"]
    assert pin_ports(argv, 4242, 4343) == [
        "python", "-m", "services.broker", "--port", "4242", "--metrics-port", "4343", "--x", "1",
    ]  # fmt: skip
    assert pin_ports(argv, 0, 0) == argv  # nothing reported: unchanged
