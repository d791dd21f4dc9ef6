"""Many partitions (issue 17 item 4): settle time, idle CPU, produce spread, failover.

For each ``P``: a fresh three-broker local cluster (one controller, default settings), a
topic of ``P`` partitions created at RF=3 (min.insync.replicas=2), then

* ``settle_s``: from the CreateTopics call until every partition has a leader and a full ISR
  (three members) in the metadata (DescribeTopics every 0.5 s);
* ``idle_cpu_pct``: each broker's CPU (user + system, ``/proc/<pid>/stat``) over
  ``--idle-s`` seconds with no client traffic, in percent of one core (max over brokers);
* ``produce_round_s``: one idempotent acks=all producer sends one 100 B record to every
  partition and awaits every acknowledgement (``--rounds`` rounds, the slowest reported);
* ``failover_s``: kill -9 of the broker leading the most partitions, until the metadata shows
  a leader on another live broker for every partition it led; ``failover_acked_s``: until a
  record sent to each of those partitions right after the kill is acknowledged.

Nothing here measures Kafka; docs/benchmarks.md puts the figures next to what the issue
reports.

    python bench/partitions.py [--partitions 1000 5000 10000] [--timeout 900]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from core import machine

from headwater.client import AsyncAdminClient, AsyncProducer
from headwater.dev.cluster import LocalCluster
from headwater.errors import HeadwaterError

TOPIC = "many"
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


async def _state(bootstrap: str) -> dict[int, tuple[int, int]]:
    """Partition -> (leader, ISR size); empty while the metadata is not there."""
    try:
        async with AsyncAdminClient(bootstrap) as admin:
            (desc,) = await admin.describe_topics([TOPIC])
    except HeadwaterError:
        return {}
    return {p.partition: (p.leader, len(p.isr)) for p in desc.partitions}


async def _until(what: str, check: object, timeout: float) -> float:
    start = time.monotonic()
    while not await check():  # type: ignore[operator]
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.5)
    return time.monotonic() - start


async def _produce_round(producer: AsyncProducer, partitions: list[int]) -> float:
    start = time.monotonic()
    futures = [await producer.send(TOPIC, b"x" * 100, partition=p) for p in partitions]
    await asyncio.gather(*futures)
    return time.monotonic() - start


async def _run(cluster: LocalCluster, partitions: int, args: argparse.Namespace) -> dict:
    bootstrap = cluster.bootstrap_servers
    t0 = time.monotonic()
    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topic(TOPIC, partitions, 3, {"min.insync.replicas": "2"})
    state: dict[int, tuple[int, int]] = {}

    async def settled() -> bool:
        nonlocal state
        state = await _state(bootstrap)
        return len(state) == partitions and all(
            leader >= 0 and isr == 3 for leader, isr in state.values()
        )

    await _until("leaders and full ISRs", settled, args.timeout)
    settle_s = time.monotonic() - t0
    print(f"  {partitions}: settled in {settle_s:.1f} s", flush=True)

    pids = {bid: proc.pid for bid, proc in cluster.brokers.items()}
    before = {bid: _cpu_s(pid) for bid, pid in pids.items()}
    await asyncio.sleep(args.idle_s)
    idle = {
        bid: round(100 * (_cpu_s(pid) - before[bid]) / args.idle_s, 1) for bid, pid in pids.items()
    }
    print(f"  {partitions}: idle CPU % per broker {idle}", flush=True)

    row: dict[str, object] = {
        "partitions": partitions,
        "settle_s": round(settle_s, 1),
        "idle_cpu_pct": idle,
    }
    async with AsyncProducer(bootstrap, acks="all", enable_idempotence=True) as producer:
        try:
            rounds = [
                await _produce_round(producer, list(range(partitions))) for _ in range(args.rounds)
            ]
        except HeadwaterError as exc:  # e.g. REQUEST_TIMED_OUT: recorded as the result
            row["produce_error"] = str(exc)
            print(f"  {json.dumps(row)}", flush=True)
            return row
        row["produce_round_s"] = round(max(rounds), 2)
        print(f"  {partitions}: produce rounds {[round(r, 2) for r in rounds]}", flush=True)

        leaders = {p: leader for p, (leader, _) in state.items()}
        counts: dict[int, int] = {}
        for leader in leaders.values():
            counts[leader] = counts.get(leader, 0) + 1
        victim = max(counts, key=lambda b: counts[b])
        led = [p for p, leader in leaders.items() if leader == victim]
        t_kill = time.monotonic()
        cluster.kill_broker(victim)
        sends = asyncio.gather(*[await producer.send(TOPIC, b"y" * 100, partition=p) for p in led])

        async def moved() -> bool:
            now = await _state(bootstrap)
            return bool(now) and all(now[p][0] not in (-1, victim) for p in led)

        await _until("new leaders", moved, args.timeout)
        failover_s = time.monotonic() - t_kill
        await sends
        row.update(
            killed_broker=victim,
            partitions_led=len(led),
            failover_s=round(failover_s, 2),
            failover_acked_s=round(time.monotonic() - t_kill, 2),
        )
    print(f"  {json.dumps(row)}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--timeout", type=float, default=900.0, help="per wait, seconds")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="keep the clusters' data and logs here"
    )
    args = parser.parse_args()
    result: dict[str, object] = {"machine": machine(), "runs": []}
    with tempfile.TemporaryDirectory(prefix="hw-partitions-") as scratch:
        tmp = args.data_dir or Path(scratch)
        for partitions in args.partitions:
            print(f"{partitions} partitions:", flush=True)
            with LocalCluster(Path(tmp) / str(partitions), brokers=3) as cluster:
                try:
                    row = asyncio.run(_run(cluster, partitions, args))
                except RuntimeError as exc:  # a wait that timed out: recorded, next size
                    row = {"partitions": partitions, "failed": str(exc)}
                    print(f"  {partitions}: {exc}", flush=True)
            result["runs"].append(row)  # type: ignore[attr-defined]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
