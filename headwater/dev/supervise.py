"""Supervision of ``headwater dev``'s child processes: report a death, restart with backoff.

Contract:

* :meth:`Supervisor.poll` is called periodically by one thread (``headwater dev``'s main loop,
  every 0.5 s). It never blocks on a child: it notices deaths, schedules and performs
  restarts, and reports; it returns False only when a child died and restarting is off
  (``--no-restart``: the caller then stops the whole cluster, today's behaviour for debugging).
* A death is reported once, on the ``out`` stream: the child's name and PID, how it ended
  (``exit code N`` or ``killed by signal SIGNAME``) and the last ``tail_lines`` lines of its
  log file.
* Restarts: the child is started again after ``policy.delay(n)`` seconds, where ``n`` counts
  its consecutive failed runs: ``initial * 2**(n-1)`` capped at ``cap`` (1, 2, 4, ... 30 s by
  default). The count goes back to 0 once a run has stayed up ``reset_after`` seconds. Only
  the dead child is touched; every other process keeps running.
* A restarted child gets the same command line except that its ports, picked at run time
  on the first start, are pinned (``--port P --metrics-port M``), so clients and peers find it
  at the same address; data directories, ids and flags are unchanged; its log is appended to.
  etcd comes back on its same client and peer ports with its data directory
  (:meth:`~headwater.dev.etcd_server.EtcdServer.restart`). ``<name> is serving again on
  ADDRESS`` is reported when a restarted service writes its ready file.
* Stopping is the caller's: ``LocalCluster.stop`` stops the current process of every child by
  PID (a child waiting for its restart is already dead), so nothing is left running.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from headwater.dev.cluster import LocalCluster, ServiceProcess
from headwater.dev.procs import ChildProcess


@dataclass(frozen=True)
class Backoff:
    """Restart delays: exponential from ``initial`` (factor 2) up to ``cap`` seconds; the
    failure count resets after a run of ``reset_after`` seconds."""

    initial: float = 1.0
    cap: float = 30.0
    reset_after: float = 60.0

    def delay(self, failures: int) -> float:
        """The delay before restart number ``failures`` (>= 1) of a row of failed runs."""
        return float(min(self.cap, self.initial * 2 ** max(0, failures - 1)))


@dataclass
class Supervised:
    """One child as the supervisor sees it.

    ``current()``: its current process (None before the first start); ``restart()``: start it
    again with the same ports, data and flags; ``serving()``: its address once the restarted
    process is serving (None meanwhile, or when the child has no such notion)."""

    name: str
    current: Callable[[], ChildProcess | None]
    restart: Callable[[], None]
    serving: Callable[[], str | None] = lambda: None
    # supervisor state
    failures: int = 0
    started_at: float = 0.0
    restart_at: float | None = None
    awaiting_ready: bool = False
    seen_pid: int | None = field(default=None, repr=False)


def describe_exit(returncode: int | None) -> str:
    """``exit code N`` / ``killed by signal SIGKILL`` (Popen's negative return codes)."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class Supervisor:
    """Watches ``children``; see the module docstring."""

    def __init__(
        self,
        children: Sequence[Supervised],
        *,
        restart: bool = True,
        policy: Backoff | None = None,
        out: TextIO | None = None,
        tail_lines: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.children = list(children)
        self.restart = restart
        self.policy = policy or Backoff()
        self._out = out
        self.tail_lines = tail_lines
        self._clock = clock
        now = clock()
        for c in self.children:
            c.started_at = now

    def _say(self, text: str) -> None:
        out = self._out if self._out is not None else sys.stderr
        print(f"headwater dev: {text}", file=out, flush=True)

    def poll(self) -> bool:
        """One supervision step; False when a child died and restarting is off."""
        now = self._clock()
        for c in self.children:
            if c.restart_at is not None:
                if now >= c.restart_at:
                    self._restart(c, now)
                continue
            proc = c.current()
            if proc is None:
                continue
            if proc.alive():
                if c.failures and now - c.started_at >= self.policy.reset_after:
                    c.failures = 0
                if c.awaiting_ready and (address := c.serving()):
                    c.awaiting_ready = False
                    self._say(f"{c.name} is serving again on {address} (pid {proc.pid})")
                continue
            self._report_death(c, proc)
            if not self.restart:
                self._say(f"{c.name} died and --no-restart is set: stopping the cluster")
                return False
            c.failures += 1
            delay = self.policy.delay(c.failures)
            c.restart_at = now + delay
            self._say(
                f"restarting {c.name} in {delay:.1f}s (restart {c.failures} in a row;"
                " same ports, data and flags; the other processes keep running)"
            )
        return True

    def _report_death(self, c: Supervised, proc: ChildProcess) -> None:
        code = proc.proc.returncode if proc.proc is not None else None
        tail = proc.log_tail(self.tail_lines)
        lines = "".join(f"\n    | {line}" for line in tail.splitlines()) or "\n    | (empty)"
        self._say(
            f"{c.name} (pid {proc.pid}) died: {describe_exit(code)}; last lines of"
            f" {proc.log_path}:{lines}"
        )

    def _restart(self, c: Supervised, now: float) -> None:
        c.restart_at = None
        c.started_at = now
        try:
            c.restart()
        except OSError as exc:  # e.g. the executable vanished: try again later
            self._say(f"restarting {c.name} failed: {exc}")
            c.failures += 1
            c.restart_at = now + self.policy.delay(c.failures)
            return
        proc = c.current()
        c.awaiting_ready = True
        self._say(f"{c.name} restarted (pid {proc.pid if proc else '?'})")


def pin_ports(argv: list[str], port: int, metrics_port: int) -> list[str]:
    """``argv`` with the values of ``--port`` and ``--metrics-port`` replaced by the ports
    the first run bound (kept as they are when that run did not report them)."""
    out = list(argv)
    for flag, value in (("--port", port), ("--metrics-port", metrics_port)):
        if value > 0 and flag in out[:-1]:
            out[out.index(flag) + 1] = str(value)
    return out


def _service(proc: ServiceProcess) -> Supervised:
    def restart() -> None:
        proc.argv = pin_ports(proc.argv, proc.port, proc.metrics_port)
        proc.start()

    def serving() -> str | None:
        return proc.address if proc.read_ready() else None

    return Supervised(proc.name, lambda: proc.child, restart, serving)


def cluster_children(cluster: LocalCluster) -> list[Supervised]:
    """etcd, the controllers, brokers and coordinators of a started ``cluster``."""
    etcd = cluster.etcd

    def etcd_serving() -> str | None:
        return etcd.endpoint if etcd.healthy() else None

    out = [Supervised("etcd", lambda: etcd.child, etcd.restart, etcd_serving)]
    for procs in (cluster.controllers, cluster.brokers, cluster.coordinators):
        out += [_service(p) for p in procs.values()]
    return out
