"""Crash failover (issue 17 item 3): the window without acknowledgements after kill -9.

A three-broker local cluster (one controller, default settings: 10 s broker session timeout),
a topic of ``P`` partitions, RF=3, min.insync.replicas=2. An idempotent acks=all producer keeps
one record in flight on every partition (one coroutine per partition: send, await the ack,
send the next), recording each acknowledgement's time and offset. Each round kills (SIGKILL)
the broker leading the most partitions, waits until every partition it led has had three
acknowledgements since, restarts it and waits for full ISRs again.

Per partition the broker led, the **window** is the longest time without an acknowledgement on
that partition from its last acknowledgement before the kill on; the figures are the p50, p99
and max over every such partition of every round. ``followed_p99_s`` is the same p99 over the
partitions the killed broker only followed (acks=all waits there until the ISR shrinks).
``resume_p50_s`` / ``resume_p99_s``: over the partitions it led, the time from the kill to
their first acknowledgement (the window less its part before the kill, which is up to one
steady gap whatever the failover costs).
``steady_gap_p99_s`` is the p99 of the gaps between consecutive acknowledgements of a partition
before the kills (from the warm-up to the kill): the window without a failure, for scale.
Afterwards every partition is read from the beginning and every acknowledged record must be
there at its acknowledged offset with its value: ``lost`` counts those that are not.

``--no-crash-detection`` starts the controller with ``--no-crash-detection`` (the etcd lease
alone detects a death: the behaviour before the controller's liveness streams); ``--compare``
runs both, lease-only first, in one run.

    python bench/failover.py [--partitions 100 1000] [--rounds 3] [--compare]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from core import machine

from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer
from headwater.client.types import TopicPartition
from headwater.dev.cluster import LocalCluster, ServiceProcess
from headwater.errors import HeadwaterError

TOPIC = "failover"


class BenchCluster(LocalCluster):
    """A LocalCluster whose controllers get ``controller_args``."""

    def __init__(self, *args: object, controller_args: list[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._controller_args = controller_args

    def _controller(self, cid: int) -> ServiceProcess:
        proc = super()._controller(cid)
        proc.argv += self._controller_args
        return proc


class Acks:
    """Acknowledgements per partition: (monotonic time, offset, value)."""

    def __init__(self, partitions: int) -> None:
        self.by_partition: list[list[tuple[float, int, bytes]]] = [[] for _ in range(partitions)]
        self.errors = 0

    def since(self, p: int, t: float) -> int:
        return sum(1 for at, _, _ in self.by_partition[p] if at > t)

    def window(self, p: int, t_kill: float) -> float:
        """Longest gap between acknowledgements of ``p`` from the last one before ``t_kill``."""
        times = [at for at, _, _ in self.by_partition[p]]
        before = [t for t in times if t <= t_kill]
        after = [t for t in times if t > t_kill]
        if not after:
            return math.inf
        points = ([before[-1]] if before else [t_kill]) + after
        return max(b - a for a, b in itertools.pairwise(points))

    def resumed_after(self, p: int, t_kill: float) -> float:
        """Time from ``t_kill`` to the first acknowledgement of ``p`` after it."""
        return next((at - t_kill for at, _, _ in self.by_partition[p] if at > t_kill), math.inf)

    def gaps_before(self, p: int, t_from: float, t_kill: float) -> list[float]:
        """Gaps between consecutive acknowledgements of ``p`` within [t_from, t_kill]."""
        times = [at for at, _, _ in self.by_partition[p] if t_from <= at <= t_kill]
        return [b - a for a, b in itertools.pairwise(times)]


async def _produce(
    producer: AsyncProducer, p: int, acks: Acks, stop: asyncio.Event, prefix: str
) -> None:
    n = 0
    while not stop.is_set():
        value = f"{prefix}-{p}-{n}".encode()
        n += 1
        try:
            meta = await (await producer.send(TOPIC, value, partition=p))
        except HeadwaterError:
            acks.errors += 1  # a record not acknowledged: not counted, not checked
            continue
        acks.by_partition[p].append((time.monotonic(), meta.offset, value))


async def _topic_state(admin: AsyncAdminClient) -> dict[int, tuple[int, int]]:
    """Partition -> (leader, ISR size); empty until the metadata has propagated."""
    try:
        (desc,) = await admin.describe_topics([TOPIC])
    except HeadwaterError:
        return {}
    return {p.partition: (p.leader, len(p.isr)) for p in desc.partitions}


async def _wait(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


async def _settled(cluster: LocalCluster, partitions: int) -> dict[int, int]:
    """Wait for a leader and a full ISR everywhere; returns partition -> leader."""
    state: dict[int, tuple[int, int]] = {}

    async def ready() -> bool:
        nonlocal state
        async with AsyncAdminClient(cluster.bootstrap_servers) as admin:
            state = await _topic_state(admin)
        return len(state) == partitions and all(
            leader >= 0 and isr == 3 for leader, isr in state.values()
        )

    await _wait("leaders and full ISRs", ready, 300)
    return {p: leader for p, (leader, _) in state.items()}


async def _verify(bootstrap: str, acks: Acks, partitions: int) -> tuple[int, int]:
    """Read every partition from the start: (acknowledged records, those missing or wrong)."""
    want: dict[int, dict[int, bytes]] = {
        p: {off: v for _, off, v in acks.by_partition[p]} for p in range(partitions)
    }
    need = {p: max(w) + 1 for p, w in want.items() if w}
    seen: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(partitions)])
        deadline = time.monotonic() + 300
        while any(len(seen[p]) < n and max(seen[p], default=-1) + 1 < n for p, n in need.items()):
            if time.monotonic() > deadline:
                break
            for r in await consumer.poll(timeout_ms=500, max_records=10_000):
                seen[r.partition][r.offset] = r.value or b""
    total = sum(len(w) for w in want.values())
    lost = sum(1 for p, w in want.items() for off, v in w.items() if seen[p].get(off) != v)
    return total, lost


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(q * len(s)) - 1)]


async def _run(cluster: LocalCluster, partitions: int, rounds: int) -> dict[str, object]:
    async with AsyncAdminClient(cluster.bootstrap_servers) as admin:
        await admin.create_topic(TOPIC, partitions, 3, {"min.insync.replicas": "2"})
    leaders = await _settled(cluster, partitions)
    acks = Acks(partitions)
    stop = asyncio.Event()
    windows: list[float] = []
    resumes: list[float] = []  # kill -> first acknowledgement, partitions the killed broker led
    others: list[float] = []  # partitions the killed broker followed (their ISR shrinks)
    steady: list[float] = []  # gaps between acknowledgements in the seconds before each kill
    per_round: list[dict[str, object]] = []
    producer = AsyncProducer(cluster.bootstrap_servers, acks="all", enable_idempotence=True)
    await producer.start()
    workers = [
        asyncio.create_task(_produce(producer, p, acks, stop, "r")) for p in range(partitions)
    ]
    try:
        for round_ in range(rounds):
            t_warm = time.monotonic()

            async def warm(t: float = t_warm) -> bool:
                return all(acks.since(p, t) >= 2 for p in range(partitions))

            await _wait("acknowledgements on every partition", warm, 120)
            counts: dict[int, int] = {}
            for leader in leaders.values():
                counts[leader] = counts.get(leader, 0) + 1
            victim = max(counts, key=lambda b: counts[b])
            led = sorted(p for p, leader in leaders.items() if leader == victim)
            t_kill = time.monotonic()
            cluster.kill_broker(victim)

            async def resumed(t: float = t_kill) -> bool:
                return all(acks.since(p, t) >= 3 for p in range(partitions))

            await _wait("acknowledgements after the kill", resumed, 180)
            w = [acks.window(p, t_kill) for p in led]
            r = [acks.resumed_after(p, t_kill) for p in led]
            resumes += r
            steady += [g for p in range(partitions) for g in acks.gaps_before(p, t_warm, t_kill)]
            o = [acks.window(p, t_kill) for p in range(partitions) if p not in led]
            windows += w
            others += o
            per_round.append(
                {
                    "killed_broker": victim,
                    "partitions_led": len(led),
                    "p50_s": round(_pct(w, 0.5), 3),
                    "max_s": round(max(w), 3),
                    "resume_p50_s": round(_pct(r, 0.5), 3),
                    "resume_max_s": round(max(r), 3),
                    "others_max_s": round(max(o, default=0.0), 3),
                }
            )
            print(f"  round {round_}: {per_round[-1]}", flush=True)
            await asyncio.to_thread(cluster.restart_broker, victim)
            leaders = await _settled(cluster, partitions)
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
        await producer.close()
    total, lost = await _verify(cluster.bootstrap_servers, acks, partitions)
    return {
        "partitions": partitions,
        "rounds": per_round,
        "window_p50_s": round(_pct(windows, 0.5), 3),
        "window_p99_s": round(_pct(windows, 0.99), 3),
        "window_max_s": round(max(windows), 3),
        "resume_p50_s": round(_pct(resumes, 0.5), 3),
        "resume_p99_s": round(_pct(resumes, 0.99), 3),
        "followed_p99_s": round(_pct(others, 0.99), 3) if others else None,
        "steady_gap_p99_s": round(_pct(steady, 0.99), 3),
        "acknowledged": total,
        "lost": lost,
        "send_errors": acks.errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="keep the clusters' data and logs here"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--no-crash-detection", action="store_true")
    mode.add_argument("--compare", action="store_true", help="lease only, then crash detection")
    args = parser.parse_args()
    modes = (
        [True, False] if args.compare else [args.no_crash_detection]  # True: lease only
    )
    result: dict[str, object] = {"machine": machine(), "runs": []}
    with tempfile.TemporaryDirectory(prefix="hw-failover-") as scratch:
        tmp = args.data_dir or Path(scratch)
        for lease_only in modes:
            for partitions in args.partitions:
                label = "lease only" if lease_only else "crash detection"
                print(f"{label}, {partitions} partitions:", flush=True)
                flags = ["--no-crash-detection"] if lease_only else []
                with BenchCluster(
                    Path(tmp) / f"{partitions}-{int(lease_only)}",
                    brokers=3,
                    controller_args=flags,
                    startup_timeout=300,  # a restarted broker opens every log on a loaded box
                ) as cluster:
                    row = asyncio.run(_run(cluster, partitions, args.rounds))
                row["mode"] = label
                print(f"  {json.dumps(row)}", flush=True)
                result["runs"].append(row)  # type: ignore[attr-defined]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
