"""`headwater dev` supervises its children, with real processes.

* A broker killed with SIGKILL is reported (its PID, ``killed by signal SIGKILL``, the last
  lines of its log) and restarted: a new PID on the same address, the other processes
  untouched; producing through that very address and consuming everything back works again;
  SIGINT (Ctrl-C) then stops the whole tree (exit 0) and no child is left running.
* With ``--no-restart`` the same death stops the whole cluster: exit code 1, every child
  gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.wait import wait_for


class Dev:
    """A `headwater dev` subprocess whose combined output is collected line by line."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli.main", "dev", "--data-dir", str(data_dir),
             "--controllers", "1", "--coordinators", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def line(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first output line matching ``pattern`` (bounded wait)."""
        rx = re.compile(pattern)

        def found() -> re.Match[str] | None:
            for line in list(self.lines):
                if m := rx.search(line):
                    return m
            return None

        try:
            return wait_for(found, timeout=timeout, what=f"a line matching {pattern!r}")
        except AssertionError as exc:
            msg = f"no {pattern!r} in the output:\n{self.output()[-4000:]}"
            raise AssertionError(msg) from exc

    def children(self) -> dict[str, int]:
        """``{"broker-1": pid, ..., "etcd": pid}``: the live child processes of the command."""
        out: dict[str, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) != self.proc.pid or fields[0] == "Z":
                continue
            args = [a.decode(errors="replace") for a in argv]
            for kind in ("broker", "controller", "coordinator"):
                if f"services.{kind}" in args:
                    out[f"{kind}-{args[args.index(f'--{kind}-id') + 1]}"] = int(entry.name)
            if args and Path(args[0]).name == "etcd":
                out["etcd"] = int(entry.name)
        return out

    def ready_port(self, name: str) -> int:
        return int(json.loads((self.data_dir / "run" / f"{name}.ready").read_text())["port"])

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return int(self.proc.returncode)


@pytest.fixture
def dev_factory(tmp_path: Path) -> Iterator[list[Dev]]:
    started: list[Dev] = []
    yield started
    for dev in started:
        left = {pid: _cmdline(pid) for pid in dev.children().values()}
        dev.stop()
        for pid, cmdline in left.items():  # whatever the command left behind, by PID
            if cmdline and _cmdline(pid) == cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _cli(*args: str, bootstrap: str, stdin: bytes | None = None) -> bytes:
    env = {**os.environ, "HEADWATER_BOOTSTRAP": bootstrap}
    proc = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, (args, proc.stderr.decode(errors="replace")[-2000:])
    return proc.stdout


def _consume_all(topic: str, n: int, bootstrap: str) -> list[int]:
    out = _cli(
        "consume", topic, "--from-beginning", "--max-messages", str(n), "--output", "json",
        bootstrap=bootstrap,
    )  # fmt: skip
    return sorted(int(json.loads(line)["value"]) for line in out.decode().splitlines() if line)


def _all_in_sync(topic: str, bootstrap: str, brokers: set[int]) -> bool:
    (described,) = json.loads(
        _cli("topics", "describe", topic, "--output", "json", bootstrap=bootstrap)
    )
    return all(p["leader"] in brokers and set(p["isr"]) == brokers for p in described["partitions"])


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def test_killed_broker_is_reported_and_restarted_on_its_address(
    tmp_path: Path, dev_factory: list[Dev]
) -> None:
    dev = Dev(tmp_path / "data", "--brokers", "2")
    dev_factory.append(dev)
    bootstrap = dev.line(r"^bootstrap: (\S+)", timeout=120).group(1)
    before = wait_for(
        lambda: c if len(c := dev.children()) == 4 else None, timeout=30, what="4 children"
    )
    _cli("topics", "create", "sup", "--partitions", "2", "--replication-factor", "2",
         bootstrap=bootstrap)  # fmt: skip
    first = [str(i) for i in range(1, 501)]
    _cli("produce", "sup", "--acks", "all", bootstrap=bootstrap, stdin="\n".join(first).encode())
    assert _consume_all("sup", 500, bootstrap) == list(range(1, 501))

    victim = before["broker-2"]
    port = dev.ready_port("broker-2")
    os.kill(victim, signal.SIGKILL)

    died = dev.line(
        rf"broker-2 \(pid {victim}\) died: killed by signal SIGKILL; last lines of (\S+):$",
        timeout=30,
    )
    log_lines = Path(died.group(1)).read_text(errors="replace").splitlines()
    start = next(i for i, ln in enumerate(dev.lines) if died.group(0) in ln)
    tail = [ln for ln in dev.lines[start + 1 : start + 21] if ln.startswith("    | ")]
    assert tail, dev.output()[-3000:]
    assert all(ln[len("    | ") :] in log_lines for ln in tail)
    dev.line(r"restarting broker-2 in \d+\.\ds \(restart 1 in a row", timeout=10)
    new_pid = int(dev.line(r"broker-2 restarted \(pid (\d+)\)", timeout=30).group(1))
    assert new_pid != victim
    address = dev.line(r"broker-2 is serving again on (\S+) \(pid", timeout=120).group(1)
    assert address == f"127.0.0.1:{port}"

    after = dev.children()
    assert after["broker-2"] == new_pid
    assert {k: v for k, v in after.items() if k != "broker-2"} == {
        k: v for k, v in before.items() if k != "broker-2"
    }, "the other processes kept running"

    wait_for(lambda: _all_in_sync("sup", address, {1, 2}), timeout=90, what="broker-2 in sync")
    more = [str(i) for i in range(501, 1001)]
    _cli("produce", "sup", "--acks", "all", bootstrap=address, stdin="\n".join(more).encode())
    assert _consume_all("sup", 1000, address) == list(range(1, 1001))

    assert dev.stop(signal.SIGINT) == 0  # Ctrl-C (the quickstart test sends SIGTERM)
    assert all(_gone(pid) for pid in after.values()), "a child outlived headwater dev"


def test_no_restart_stops_everything_on_a_death(tmp_path: Path, dev_factory: list[Dev]) -> None:
    dev = Dev(tmp_path / "data", "--brokers", "1", "--no-restart")
    dev_factory.append(dev)
    dev.line(r"^bootstrap: ", timeout=120)
    children = wait_for(
        lambda: c if len(c := dev.children()) == 3 else None, timeout=30, what="3 children"
    )
    os.kill(children["broker-1"], signal.SIGKILL)
    assert dev.proc.wait(timeout=90) == 1
    dev.line(r"broker-1 \(pid \d+\) died: killed by signal SIGKILL", timeout=10)
    dev.line(r"--no-restart is set: stopping the cluster", timeout=10)
    assert "restarted" not in dev.output()
    assert all(_gone(pid) for pid in children.values()), "a child outlived headwater dev"
