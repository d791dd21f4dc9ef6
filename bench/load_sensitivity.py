"""The 1 KiB bulk produce rows under CPU contention: throughput, CPU per MB, run-queue wait per MB.

    .venv/bin/python bench/load_sensitivity.py --out DIR [--records 200000] [--rounds 3]
        [--levels 0,1,2] [--systems headwater,java,ck] [--max-seconds 60]

What it measures (issue 17 item 5): why ``produce-max p=1 1024B acks=1|all rf=1`` (Headwater's
``send_many`` against Kafka's best client) loses its lead when the machine is loaded. For each
system and each of the two rows it runs the row, as bench/side_by_side.py does, at contention
levels of 0, 1 and 2 CPU burners, in ``--rounds`` rounds (the level order reversed every round,
the client order reversed every level), and records per run:

* records/s and MB/s: the peer harness's own figure (``bench/peers/headwater.py``
  ``produce_max`` = ``headwater bench produce --mode many``, 10% warm-up excluded;
  ``bench/peers/kafka.py`` ``java_produce`` = ProducerPerformance's steady-state line and
  ``py_produce_max`` = confluent-kafka ``produce()``, whole run);
* CPU seconds of ALL the system's processes over the run — servers and client: each system
  runs in its own cgroup v1 ``cpuacct`` group (``/sys/fs/cgroup/cpuacct/hwload-<pid>-<system>``),
  which its cluster processes and clients inherit (this script joins the group while it starts
  the cluster or runs a client, so a client subprocess and confluent-kafka's in-process threads
  count too); ``cpuacct.usage`` before and after. Split: ``servers`` = the cluster's processes
  (``/proc/<pid>/stat`` utime+stime, dead threads included), ``client`` = the rest (the client's
  start-up included: ``fixed`` runs of ``--fixed-records`` records at level 0 give that cost);
* CPU seconds per MB (MB = 10**6 bytes of record values, every record sent, warm-up included);
* run-queue wait per MB: the second field of ``/proc/<tid>/schedstat`` (ns a thread was
  runnable but waiting for a CPU) summed over every thread of the group, sampled every 0.2 s
  (``tasks`` of the cgroup) so threads that exit during the run count up to their last sample
  (at most 0.2 s of a dying thread's wait is missed).

Burners: ``--levels`` gives how many; each is ``python -c "while True: pass"`` started by this
script at its own nice (so at the benchmark's nice), in a session of its own and moved to the
root cpuacct group, stopped by PID after the level. With the kernel's autogroup scheduling
(``kernel.sched_autogroup_enabled=1`` here) every session is one scheduling entity, and the
cluster processes run in sessions of their own (``headwater.dev.procs.ChildProcess``), so a
burner weighs as much as one server process — as other users' work does.

Both clusters (Headwater: etcd, one controller, one broker; Kafka: one combined KRaft node)
stay up for the whole run; every run writes a topic of its own, created before and deleted
after the measured window (Kafka's with confluent-kafka's AdminClient, so no TopicCommand JVM
falls inside the window). Output: ``DIR/runs.jsonl`` (one line per run) and ``DIR/summary.md``
(medians per system, row and level; ratios of Headwater to Kafka's best client per level).
``--report DIR/runs.jsonl`` prints the summary again. Needs root (cgroup v1 cpuacct writable).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.peers import headwater as hw_peer
from bench.peers import kafka as kafka_peer
from bench.peers.common import MB, Row, Workload

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
ROWS = (Workload("produce-max", 1, 1024, "1", 1), Workload("produce-max", 1, 1024, "all", 1))
CLIENTS = {"headwater": "headwater send_many", "java": "kafka java perf-test", "ck": "kafka ck"}
TICK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[load {time.strftime('%H:%M:%S', time.gmtime())}] {msg}", flush=True)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# ---------------------------------------------------------------- accounting


class CpuGroup:
    """A cgroup v1 cpuacct group this script can join and leave (its children inherit it)."""

    def __init__(self, name: str) -> None:
        self.path = CPUACCT / f"hwload-{os.getpid()}-{name}"
        self.path.mkdir()

    def join(self, pid: int | None = None) -> None:
        (self.path / "cgroup.procs").write_text(str(pid or os.getpid()))

    @staticmethod
    def leave(pid: int | None = None) -> None:
        (CPUACCT / "cgroup.procs").write_text(str(pid or os.getpid()))

    @contextmanager
    def inside(self) -> Iterator[None]:
        self.join()
        try:
            yield
        finally:
            self.leave()

    def usage_ns(self) -> int:
        return int((self.path / "cpuacct.usage").read_text())

    def procs(self) -> list[int]:
        return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]

    def tasks(self) -> list[int]:
        return [int(x) for x in (self.path / "tasks").read_text().split()]

    def remove(self) -> None:
        for pid in self.procs():  # anything left (there should be nothing) back to the root
            with contextlib.suppress(OSError):
                self.leave(pid)
        try:
            self.path.rmdir()
        except OSError as e:
            log(f"could not remove {self.path}: {e}")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of process ``pid`` (every thread, dead ones included), in seconds."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def schedstat(tid: int) -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable but waiting in a run queue) of thread ``tid``."""
    try:
        run, wait, _ = Path(f"/proc/{tid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return None
    return int(run), int(wait)


class WaitSampler:
    """Run-queue wait of every thread of a group over a window, sampled every ``interval``."""

    def __init__(self, group: CpuGroup, interval: float = 0.2) -> None:
        self.group, self.interval = group, interval
        self.first: dict[int, tuple[int, int]] = {}
        self.last: dict[int, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        for tid in self.group.tasks():
            s = schedstat(tid)
            if s is not None:
                self.last[tid] = s

    def __enter__(self) -> WaitSampler:
        self._sample()
        self.first = dict(self.last)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def totals_s(self) -> tuple[float, float]:
        """(CPU s, run-queue wait s) of the group's threads over the window."""
        run = wait = 0
        for tid, (r, w) in self.last.items():
            r0, w0 = self.first.get(tid, (0, 0))
            run += r - r0
            wait += w - w0
        return run / 1e9, wait / 1e9


# ---------------------------------------------------------------- burners


@contextmanager
def burners(n: int) -> Iterator[list[int]]:
    """``n`` busy processes at this process's nice, each in its own session (autogroup),
    outside every measured group; killed by PID on exit."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(n)
    ]
    try:
        for p in procs:
            CpuGroup.leave(p.pid)
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


# ---------------------------------------------------------------- the systems


class System:
    """One system's cluster, its cgroup and how to run a row with one of its clients."""

    name = ""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.group = CpuGroup(self.name)
        self.server_pids: list[int] = []

    def run(self, client: str, w: Workload, n: int, max_s: float, topic: str) -> Row:
        raise NotImplementedError

    def create(self, topic: str) -> None:
        raise NotImplementedError

    def delete(self, topic: str) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def counters(self, topic: str) -> dict[str, float]:
        """Server-side counters of ``topic`` worth keeping with the run (none by default)."""
        return {}


class HeadwaterSystem(System):
    name = "headwater"

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        from headwater.dev.cluster import LocalCluster

        with self.group.inside():
            self.cluster = LocalCluster(tmp / "headwater", brokers=1).start()
        self.server_pids = [p for p in self.group.procs() if p != os.getpid()]

    def create(self, topic: str) -> None:
        pass  # ``headwater bench`` creates it (one admin call, inside the window)

    def run(self, client: str, w: Workload, n: int, max_s: float, topic: str) -> Row:
        return hw_peer.produce_max(self.cluster.bootstrap, w, n, max_s, topic=topic)[0]

    def delete(self, topic: str) -> None:
        from headwater.client.admin import AsyncAdminClient

        async def go() -> None:
            async with AsyncAdminClient(self.cluster.bootstrap) as a:
                await a.delete_topics([topic])

        asyncio.run(go())

    def stop(self) -> None:
        self.cluster.stop()

    def counters(self, topic: str) -> dict[str, float]:
        """The broker's out-of-order refusals and reorder waits for ``topic`` (the sequence
        checks of an idempotent produce: acks=all turns idempotence on)."""
        import urllib.request

        url = self.cluster.brokers[1].metrics_url
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if f'topic="{topic}"' not in line:
                continue
            if line.startswith("headwater_broker_producer_rejections_total") and (
                'reason="out_of_order"' in line
            ):
                out["out_of_order_refused"] = float(line.rsplit(" ", 1)[1])
            elif line.startswith("headwater_broker_produce_reorder_waits_total"):
                out["reorder_waits"] = float(line.rsplit(" ", 1)[1])
        return out


class KafkaSystem(System):
    name = "kafka"

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        libs = kafka_peer.ensure_libs()
        self.cluster = kafka_peer.KafkaCluster(libs, tmp / "kafka", 1)
        with self.group.inside():
            self.cluster.start()
        self.server_pids = [p.pid for p in self.cluster.procs]
        from confluent_kafka.admin import AdminClient

        # created outside the group: its threads are not counted
        self.admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap})

    def create(self, topic: str) -> None:
        from confluent_kafka.admin import NewTopic

        for f in self.admin.create_topics([NewTopic(topic, 1, 1)]).values():
            f.result(60)

    def delete(self, topic: str) -> None:
        for f in self.admin.delete_topics([topic]).values():
            f.result(60)

    def run(self, client: str, w: Workload, n: int, max_s: float, topic: str) -> Row:
        if client == "java":
            return kafka_peer.java_produce(self.cluster, w, False, max_s, ["-Xmx1g"], topic, n)
        return kafka_peer.py_produce_max(self.cluster, w, False, max_s, topic, n)

    def stop(self) -> None:
        self.cluster.stop()


def measure(
    system: System, client: str, w: Workload, n: int, max_s: float, seq: int
) -> dict[str, object]:
    topic = f"load-{client}-{w.acks}-{seq}"
    system.create(topic)
    utc0, load0 = time.strftime("%H:%M:%S", time.gmtime()), loadavg()
    servers0 = sum(proc_cpu_s(p) for p in system.server_pids)
    cpu0 = system.group.usage_ns()
    t0 = time.monotonic()
    with system.group.inside(), WaitSampler(system.group) as ws:
        row = system.run(client, w, n, max_s, topic)
    wall = time.monotonic() - t0
    cpu_s = (system.group.usage_ns() - cpu0) / 1e9
    servers_s = sum(proc_cpu_s(p) for p in system.server_pids) - servers0
    _, wait_s = ws.totals_s()
    counters = system.counters(topic)
    system.delete(topic)
    mb = n * w.record_size / MB
    return {
        "client": CLIENTS[client],
        "row": w.key,
        "records_per_sec": row.records_per_sec,
        "mb_per_sec": row.mb_per_sec,
        "records_sent": n,
        "wall_s": wall,
        "cpu_s": cpu_s,
        "servers_cpu_s": servers_s,
        "client_cpu_s": cpu_s - servers_s,
        "wait_s": wait_s,
        "cpu_s_per_mb": cpu_s / mb,
        "servers_cpu_s_per_mb": servers_s / mb,
        "client_cpu_s_per_mb": (cpu_s - servers_s) / mb,
        "wait_s_per_mb": wait_s / mb,
        "cores_busy": cpu_s / wall,
        "utc": utc0,
        "load_before": load0,
        "load_after": loadavg(),
        "harness_note": row.note,
        "latency_ms": row.latency_ms,
        "counters": counters,
    }


# ---------------------------------------------------------------- report


def rate(r: dict[str, object]) -> float:
    return float(r["records_per_sec"])  # type: ignore[arg-type]


def _counters(rs: list[dict[str, object]]) -> str:
    """Per run: the broker's out-of-order refusals / reorder waits (Headwater only)."""
    cs = [r.get("counters") or {} for r in rs]
    if not any(cs):
        return "—"
    return ", ".join(
        f"{c.get('out_of_order_refused', 0):.0f}/{c.get('reorder_waits', 0):.0f}"  # type: ignore[union-attr]
        for c in cs
    )


def summary(runs: list[dict[str, object]]) -> str:
    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    keys = sorted({(str(r["row"]), int(r["level"]), str(r["client"])) for r in runs if r["n"]})
    out = [
        "| row | burners | client | runs | records/s | MB/s | CPU s/MB (all) | servers | "
        "client | cores busy | run-queue wait s/MB | out-of-order refused / reorder waits |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row, level, client in keys:
        rs = [
            r
            for r in runs
            if r["row"] == row and r["level"] == level and r["client"] == client and not r["fixed"]
        ]
        if not rs:
            continue

        def m(k: str, rs: list[dict[str, object]] = rs) -> float:
            return med([float(r[k]) for r in rs])  # type: ignore[arg-type]

        out.append(
            f"| {row.split(' rf=')[0].replace('produce-max ', '')} | {level} | {client} | "
            f"{len(rs)} | {m('records_per_sec'):,.0f} | {m('mb_per_sec'):,.1f} | "
            f"{m('cpu_s_per_mb') * 1000:.2f} ms | {m('servers_cpu_s_per_mb') * 1000:.2f} ms | "
            f"{m('client_cpu_s_per_mb') * 1000:.2f} ms | {m('cores_busy'):.2f} | "
            f"{m('wait_s_per_mb') * 1000:.2f} ms | {_counters(rs)} |"
        )
    out += ["", "Headwater / Kafka's best client (medians of the per-round ratios):", ""]
    out += ["| row | burners | ratio per round | median |", "|---|---:|---|---:|"]
    for row in sorted({str(r["row"]) for r in runs}):
        for level in sorted({int(r["level"]) for r in runs}):  # type: ignore[call-overload]
            ratios = []
            for rnd in sorted({int(r["round"]) for r in runs if r["round"] >= 0}):  # type: ignore[call-overload,operator]
                cell = [
                    r
                    for r in runs
                    if r["row"] == row
                    and r["level"] == level
                    and r["round"] == rnd
                    and not r["fixed"]
                ]
                hw = [rate(r) for r in cell if r["client"] == CLIENTS["headwater"]]
                kf = [rate(r) for r in cell if r["client"] != CLIENTS["headwater"]]
                if hw and kf and max(kf) > 0:
                    ratios.append(hw[0] / max(kf))
            if ratios:
                out.append(
                    f"| {row.split(' rf=')[0].replace('produce-max ', '')} | {level} | "
                    f"{', '.join(f'{x:.2f}' for x in ratios)} | {med(ratios):.2f}x |"
                )
    fixed = [r for r in runs if r["fixed"]]
    if fixed:
        out += ["", "Fixed cost of a client run (start-up included), level 0:", ""]
        for r in fixed:
            out.append(
                f"* {r['client']} {r['row']}: {r['records_sent']} records, CPU {r['cpu_s']:.2f} s "
                f"(client {r['client_cpu_s']:.2f} s), wall {r['wall_s']:.2f} s"
            )
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- driver


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--fixed-records", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--levels", default="0,1,2")
    ap.add_argument("--systems", default="headwater,java,ck")
    ap.add_argument("--max-seconds", type=float, default=60)
    ap.add_argument("--report", type=Path, help="print the summary of a runs.jsonl")
    a = ap.parse_args()
    if a.report:
        runs = [json.loads(x) for x in a.report.read_text().splitlines() if x.strip()]
        print(summary(runs))
        return
    if a.out is None:
        ap.error("--out is required")
    a.out.mkdir(parents=True, exist_ok=True)
    runs_path = a.out / "runs.jsonl"

    def terminated(signum: int, _frame: object) -> None:
        raise SystemExit(f"signal {signum}: stopping")

    signal.signal(signal.SIGTERM, terminated)
    clients = a.systems.split(",")
    levels = [int(x) for x in a.levels.split(",")]
    runs: list[dict[str, object]] = []
    systems: dict[str, System] = {}
    seq = 0
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    log(f"start; load {loadavg()}; autogroup {autogroup}")
    with tempfile.TemporaryDirectory(prefix="hw-load-") as tmp:
        try:
            if "headwater" in clients:
                systems["headwater"] = HeadwaterSystem(Path(tmp))
            if {"java", "ck"} & set(clients):
                systems["kafka"] = KafkaSystem(Path(tmp))
            log(f"clusters up; load {loadavg()}")

            def one(client: str, w: Workload, n: int, level: int, rnd: int, fixed: bool) -> None:
                nonlocal seq
                seq += 1
                system = systems["headwater" if client == "headwater" else "kafka"]
                try:
                    r = measure(system, client, w, n, a.max_seconds, seq)
                except Exception as e:  # one failed run must not lose the others
                    log(f"FAILED {client} {w.key} level {level}: {e!r}")
                    return
                r.update(level=level, round=rnd, fixed=fixed, n=n)
                runs.append(r)
                with open(runs_path, "a") as f:
                    f.write(json.dumps(r) + "\n")
                log(
                    f"r{rnd} L{level} {r['client']:22} acks={w.acks:3} "
                    f"{r['records_per_sec']:>9,.0f} rec/s {r['mb_per_sec']:6.1f} MB/s "
                    f"cpu {r['cpu_s']:.2f}s ({float(r['cpu_s_per_mb']) * 1000:.2f} ms/MB, "  # type: ignore[arg-type]
                    f"servers {float(r['servers_cpu_s_per_mb']) * 1000:.2f}) "  # type: ignore[arg-type]
                    f"wait {float(r['wait_s_per_mb']) * 1000:.2f} ms/MB load {r['load_after']}"  # type: ignore[arg-type]
                )

            for client in clients:  # start-up cost of each client, no contention
                one(client, ROWS[0], a.fixed_records, 0, -1, True)
            for rnd in range(a.rounds):
                for li, level in enumerate(levels if rnd % 2 == 0 else levels[::-1]):
                    with burners(level) as pids:
                        log(f"round {rnd} level {level}: burners {pids}; load {loadavg()}")
                        for wi, w in enumerate(ROWS):
                            order = clients if (rnd + li + wi) % 2 == 0 else clients[::-1]
                            for client in order:
                                one(client, w, a.records, level, rnd, False)
        finally:
            for s in systems.values():
                try:
                    s.stop()
                finally:
                    s.group.remove()
    text = summary(runs)
    (a.out / "summary.md").write_text(text)
    print(text)
    log(f"done; load {loadavg()}")


if __name__ == "__main__":
    main()
