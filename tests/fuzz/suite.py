"""The hostile-input suite (issue 15 item 3): every RPC, every case of :mod:`tests.fuzz.cases`,
against a real cluster whose every service process runs under a memory cap.

:func:`start` starts the cluster (etcd, 1 controller, 2 brokers, 1 coordinator; each service
under :class:`tests.fuzz.memcap.MemoryCap`) and seeds the acknowledged guard records
(:mod:`tests.fuzz.guard`). :meth:`HostileRun.run_rpc` sends one RPC all its cases, one at a
time, round-robin over the processes serving it, and judges each answer with
:func:`tests.fuzz.rpcs.call` (OK, or a typed status; UNKNOWN, untyped INTERNAL,
UNKNOWN_SERVER_ERROR and hangs are bad). After every case it checks that no process exited
and records each process's memory peak; a process that exited is reported with its exit
code, the case that preceded its death and its last log line, and restarted, so the next
RPCs are judged on a whole cluster. After each RPC every process must answer health
SERVING. :meth:`HostileRun.final_problems` is the end check: no OOM kill, every peak under
the cap, no acknowledged guard record lost, a fresh produce/fetch round trip, no traceback
in any log.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from headwater.dev.cluster import LocalCluster, ServiceProcess
from tests.fuzz import campaign, cases, guard, rpcs
from tests.fuzz.memcap import MemoryCap
from tests.helpers.wait import wait_for

#: How long a process may take to answer health SERVING after an RPC's cases.
SERVING_WAIT = 15.0
#: A rise of a process's memory peak during one case that is logged (to name the case).
GROWTH_NOTED = 200 << 20


@dataclass
class HostileRun:
    """A capped cluster, its guard records, and what the cases found so far."""

    cluster: LocalCluster
    cap: MemoryCap
    guard: guard.Guard
    scale: cases.Scale = cases.CI
    peaks: dict[str, int] = field(default_factory=dict)
    deaths: list[str] = field(default_factory=list)
    calls: int = 0
    log: Callable[[str], None] = print
    _channels: dict[str, grpc.Channel] = field(default_factory=dict)
    #: The last cases sent to each process (named in the report of its death).
    _recent: dict[str, collections.deque[str]] = field(default_factory=dict)

    # ---- processes

    def procs(self) -> list[ServiceProcess]:
        c = self.cluster
        return [*c.controllers.values(), *c.brokers.values(), *c.coordinators.values()]

    def addresses(self, kinds: tuple[str, ...]) -> list[str]:
        return [p.address for p in self.procs() if p.kind in kinds and p.alive() and p.port]

    def _channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            self._channels[address] = rpcs.open_channel(address)
        return self._channels[address]

    def _sample(self, during: str = "") -> None:
        """Update every process's peak; a rise of over :data:`GROWTH_NOTED` is logged."""
        for p in self.procs():
            pid = p.pid if p.alive() else None
            peak = self.cap.peak_bytes(p.name, pid)
            before = self.peaks.get(p.name, 0)
            if during and before and peak - before > GROWTH_NOTED:
                self.log(
                    f"{p.name} peak +{(peak - before) >> 20} MiB to {peak >> 20} MiB: {during}"
                )
            self.peaks[p.name] = max(before, peak)

    def _check_deaths(self, after: str) -> list[str]:
        """Report and restart every process that exited."""
        found = []
        for p in self.procs():
            if p.alive():
                continue
            code = p.child.proc.returncode if p.child and p.child.proc else None
            tail = p.child.log_tail(3).replace("\n", " | ") if p.child else ""
            recent = " ; ".join(self._recent.get(p.name, ()))
            msg = (
                f"{p.name} exited (code {code}, OOM kills {self.cap.oom_kills(p.name)}, "
                f"peak {self.peaks.get(p.name, 0) >> 20} MiB) after {after}; the last cases "
                f"it was sent: {recent}; log: {tail[-300:]}"
            )
            found.append(msg)
            self.deaths.append(msg)
            self.log(msg)
            channel = self._channels.pop(p.address, None)
            if channel is not None:
                channel.close()
            restart = {
                "broker": self.cluster.restart_broker,
                "controller": self.cluster.restart_controller,
                "coordinator": self.cluster.restart_coordinator,
            }[p.kind]
            restart(p.node_id)
        return found

    def _not_serving(self) -> list[str]:
        bad = []
        for p in self.procs():
            try:
                wait_for(
                    lambda p=p: rpcs.healthy(p.address, timeout=5),  # type: ignore[misc]
                    timeout=SERVING_WAIT,
                    what=f"{p.name} SERVING",
                    interval=0.2,
                )
            except AssertionError:
                bad.append(f"{p.name} not SERVING {SERVING_WAIT:.0f}s after the cases")
        return bad

    # ---- cases

    def run_rpc(self, rpc: rpcs.Rpc) -> list[str]:
        """Send ``rpc`` every hostile case; the bad answers, deaths and unhealthy processes."""
        bad: list[str] = []
        for i, case in enumerate(cases.cases(rpc, self.scale, campaign.TOPIC)):
            targets = self.addresses(rpc.kinds)
            if not targets:
                bad.append(f"{rpc.name}: no live process serves it")
                break
            address = targets[i % len(targets)]
            target = next(p.name for p in self.procs() if p.address == address)
            self._recent.setdefault(target, collections.deque(maxlen=4)).append(
                f"{rpc.name} [{case.kind}: {case.label}]"
            )
            started = time.monotonic()
            send = functools.partial(rpcs.call, self._channel(address), rpc, case.request())
            try:
                outcome = rpcs.run_queue_with_timeout(send, rpcs.CALL_DEADLINE + 20)
            except TimeoutError as exc:
                outcome = rpcs.Outcome("bad", f"client-side hang: {exc}")
            del send  # an inflated request is tens of MB
            self.calls += 1
            took = time.monotonic() - started
            where = f"{rpc.name} [{case.kind}: {case.label}] @ {target}"
            self._sample(where)
            if outcome.kind == "bad":
                detail = outcome.detail if len(outcome.detail) < 500 else outcome.detail[:500] + "…"
                bad.append(f"{where}: {detail} ({took:.1f}s)")
                self.log(bad[-1])
            bad += self._check_deaths(where)
        bad += self._not_serving()
        bad += self._check_deaths(f"{rpc.name} (after its cases)")
        return bad

    # ---- the end

    def memory_problems(self) -> list[str]:
        self._sample()
        out = []
        for p in self.procs():
            kills = self.cap.oom_kills(p.name)
            peak = self.peaks.get(p.name, 0)
            if kills:
                out.append(f"{p.name}: killed {kills}x by the memory cap")
            if peak >= self.cap.cap_bytes:
                out.append(f"{p.name}: peak {peak >> 20} MiB reached the cap")
        return out

    def final_problems(self) -> list[str]:
        """Memory, acknowledged records, a fresh round trip, process logs."""
        return [
            *self.memory_problems(),
            *self._check_deaths("the end of the run"),
            *guard.lost(self.cluster, self.guard),
            *guard.round_trip(self.cluster),
            *campaign.log_alarms(self.cluster),
        ]

    def summary(self) -> str:
        peaks = ", ".join(f"{n} {v >> 20} MiB" for n, v in sorted(self.peaks.items()))
        return (
            f"{self.calls} hostile calls; memory cap {self.cap.cap_bytes >> 20} MiB per process "
            f"({self.cap.mode}); peaks: {peaks}; deaths: {len(self.deaths)}"
        )

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()
        self._channels.clear()


def start(data_dir: Path, scale: cases.Scale = cases.CI) -> HostileRun:
    """Start the capped cluster and seed the guard records (the caller calls :func:`stop`)."""
    cap = MemoryCap()
    try:
        cluster = campaign.start_cluster(data_dir, brokers=2, launch_prefix=cap.prefix)
    except BaseException:
        cap.close()
        raise
    try:
        seeded = guard.seed(cluster)
    except BaseException:
        cluster.stop()
        cap.close()
        raise
    return HostileRun(cluster, cap, seeded, scale)


def stop(run: HostileRun) -> None:
    run.close()
    run.cluster.stop()
    run.cap.close()
