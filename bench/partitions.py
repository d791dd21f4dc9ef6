"""Many partitions (issue 17 item 4): settle time, idle CPU, produce spread, failover, on
Headwater and on Apache Kafka (the comparison the issue asks for).

For each system and each ``P``: a fresh three-broker local cluster, a topic of ``P``
partitions created at RF=3 (min.insync.replicas=2), then

* ``settle_s``: from the CreateTopics call until every partition has a leader and a full ISR
  (three members) in the metadata (DescribeTopics every 0.5 s);
* ``idle_cpu_pct``: each broker's CPU (user + system, ``/proc/<pid>/stat``) over
  ``--idle-s`` seconds with no client traffic right after the settle, in percent of one
  core, per broker id: this window still holds the creation's tail (on Headwater the new
  replicas' leader-epoch files written behind by the flush passes, on Kafka the JVMs' JIT);
* ``steady_idle_cpu_pct``: the same over a second window that starts ``--steady-after-s``
  (default 60) seconds after the settle, still with no client traffic: the steady state;
* ``produce_round_s``: one idempotent acks=all producer sends one 100 B record to every
  partition and awaits every acknowledgement (``--rounds`` rounds, the slowest reported);
* ``failover_s``: kill -9 of the broker leading the most partitions, until the metadata shows
  a leader on another live broker for every partition it led; ``failover_acked_s``: until a
  record sent to each of those partitions right after the kill is acknowledged.

Headwater (``--system headwater``, the default): ``LocalCluster`` with three brokers and one
controller, default settings; the clients are Headwater's (``AsyncAdminClient.describe_topics``,
``AsyncProducer(acks="all", enable_idempotence=True)``).

Kafka (``--system kafka``, bench/partitions_kafka.py): Kafka 4.3.1 from Maven Central, three
combined broker+controller KRaft nodes on 127.0.0.1 (bench/peers/kafka.py ``running_cluster``:
each node is also a KRaft voter, so a kill leaves 2 of 3 voters, a quorum), Kafka's default
settings, ``--kafka-heap`` per JVM (default 1g, ``-Xms`` = ``-Xmx``). Each node's open-file
limit (RLIMIT_NOFILE, soft and hard) is raised with ``prlimit`` once it runs to
``--kafka-nofile`` (default 100,000, Kafka's docs' recommendation; 10,000 partitions at RF=3 are
10,000 replicas per node, each with open segment files); raising the hard limit needs
CAP_SYS_RESOURCE, without it the soft limit goes up to the hard one (what the JVM does itself
at start, ``-XX:+MaxFDLimit``). The row records the limit in effect (``nofile``), the heap and
``vm.max_map_count`` (each replica maps two index files; not changed here). ``--data-dir``
keeps Kafka's data and logs under ``DIR/kafka-P``. The client is confluent-kafka (librdkafka)
in this process:

* settle: ``AdminClient.create_topics`` (replication_factor 3, ``min.insync.replicas=2``), then
  ``AdminClient.list_topics`` every 0.5 s until every partition has a leader and three ISR
  members. Kafka 4.3.1's controller refuses an operation of more than 10,000 metadata records
  (POLICY_VIOLATION), which a 10,000-partition topic exceeds (one record per partition plus
  the topic's and its config's: 9,997 partitions is the most one CreateTopics creates here);
  then the topic is created with 5,000 partitions and grown by ``create_partitions`` in steps
  of 5,000, timed from the first (refused) call, and the row says so (``create``);
* idle CPU: the JVMs' ``/proc/<pid>/stat``, per ``node.id``;
* produce round: ``Producer(acks=all, enable.idempotence=true)`` (librdkafka's other defaults,
  linger.ms=5), ``produce()`` of one 100 B record per partition, ``flush()`` until every
  delivery report arrived, none with an error (else ``produce_error``);
* failover: leaders counted from ``list_topics`` just before the kill; ``kill -9`` of the node
  leading the most partitions; the metadata is then read from a client bootstrapped to the two
  survivors; the records to the partitions it led are sent right after the kill with the
  same producer, ``failover_acked_s`` when ``flush()`` has all their delivery reports. The
  row also names the active KRaft controller at the kill (``active_controller``, from the
  nodes' logs): killing it adds a controller election before the fencing of the dead broker
  (Kafka's default ``broker.session.timeout.ms`` of 9 s) that moves its leaders.

Every process started is stopped by PID at the end, also on failure or SIGTERM. A wait that
times out is recorded in the row (``failed``) and the next size runs. docs/benchmarks.md puts
the figures next to what the issue reports.

    python bench/partitions.py [--system headwater kafka] [--partitions 1000 5000 10000]
        [--timeout 900] [--rounds 2] [--idle-s 20] [--steady-after-s 60] [--data-dir DIR]
        [--kafka-heap 1g] [--kafka-nofile 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
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


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def cpu_pct_since(
    pids: dict[int, int], before: dict[int, float], seconds: float
) -> dict[int, float]:
    """Each process's CPU since ``before`` (``cpu_s`` values) over ``seconds``, in percent of
    one core."""
    return {key: round(100 * (cpu_s(pid) - before[key]) / seconds, 1) for key, pid in pids.items()}


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
    before = {bid: cpu_s(pid) for bid, pid in pids.items()}
    await asyncio.sleep(args.idle_s)
    idle = cpu_pct_since(pids, before, args.idle_s)
    print(f"  {partitions}: idle CPU % per broker {idle}", flush=True)
    await asyncio.sleep(max(0.0, args.steady_after_s - args.idle_s))
    before = {bid: cpu_s(pid) for bid, pid in pids.items()}
    await asyncio.sleep(args.idle_s)
    steady = cpu_pct_since(pids, before, args.idle_s)
    print(f"  {partitions}: steady idle CPU % per broker {steady}", flush=True)

    row: dict[str, object] = {
        "system": "headwater",
        "partitions": partitions,
        "settle_s": round(settle_s, 1),
        "idle_cpu_pct": idle,
        "steady_idle_cpu_pct": steady,
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


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # the context managers then stop the clusters by PID


def _headwater(partitions: int, args: argparse.Namespace, root: Path) -> dict:
    with LocalCluster(root, brokers=3) as cluster:
        try:
            return asyncio.run(_run(cluster, partitions, args))
        except RuntimeError as exc:  # a wait that timed out: recorded, next size
            print(f"  {partitions}: {exc}", flush=True)
            return {"system": "headwater", "partitions": partitions, "failed": str(exc)}


def main() -> None:
    signal.signal(signal.SIGTERM, _terminated)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--system", nargs="+", choices=["headwater", "kafka"], default=["headwater"]
    )
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--timeout", type=float, default=900.0, help="per wait, seconds")
    parser.add_argument("--idle-s", type=float, default=20.0, help="each idle window, seconds")
    parser.add_argument(
        "--steady-after-s",
        type=float,
        default=60.0,
        help="the second idle window starts this long after the settle",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="keep the clusters' data and logs here"
    )
    parser.add_argument("--kafka-heap", default="1g", help="JVM heap of each Kafka node")
    # Kafka's docs, "File descriptors and mmap": "We recommend at least 100000 allowed file
    # descriptors for the broker processes as a starting point" (kafka.apache.org/documentation/#os)
    parser.add_argument("--kafka-nofile", type=int, default=100_000, help="RLIMIT_NOFILE")
    args = parser.parse_args()
    result: dict[str, object] = {"machine": machine(), "runs": []}
    with tempfile.TemporaryDirectory(prefix="hw-partitions-") as scratch:
        tmp = args.data_dir or Path(scratch)
        for system in args.system:
            for partitions in args.partitions:
                print(f"{system}, {partitions} partitions:", flush=True)
                if system == "kafka":
                    import partitions_kafka  # confluent-kafka and Java only when asked for

                    keep = args.data_dir / f"kafka-{partitions}" if args.data_dir else None
                    row = partitions_kafka.measure(partitions, args, keep)
                    print(f"  {json.dumps(row)}", flush=True)
                else:
                    row = _headwater(partitions, args, Path(tmp) / str(partitions))
                result["runs"].append(row)  # type: ignore[attr-defined]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
