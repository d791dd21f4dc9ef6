"""Replication benchmarks (issue 3), one run, one machine, for docs/benchmarks.md.

1. Throughput ratio: ``headwater bench produce`` of 1 KiB records into an RF=1 topic with
   acks=1 and into an RF=3 topic (min.insync.replicas=2) with acks=all, on the same
   three-broker local cluster, alternating, so the ratio comes from one run.
2. Leader failover: a topic of 100 partitions, RF=3, spread over three brokers; kill -9 the
   broker leading the most partitions and measure (a) until every partition it led has a new
   leader in a surviving broker's metadata and (b) until an acks=all write to each of them
   has been acknowledged.

    python bench/replication.py [--records 500000] [--session-timeout-s N]

``--session-timeout-s`` is passed to the brokers as their etcd lease TTL when the broker
supports the flag: the controller learns of a kill -9 only when the lease expires, so the
detection part of failover is that timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from core import _bench, machine

from headwater.client import AdminClient, Producer
from headwater.dev.cluster import LocalCluster
from headwater.errors import UnknownTopicOrPartitionError


def _broker_flags(session_timeout_s: int | None) -> list[str]:
    if session_timeout_s is None:
        return []
    help_text = subprocess.run(
        [sys.executable, "-m", "services.broker", "--help"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    if "--session-timeout-s" not in help_text:
        print("note: this broker has no --session-timeout-s flag; using its default lease TTL")
        return []
    return ["--session-timeout-s", str(session_timeout_s)]


def throughput_ratio(cluster: LocalCluster, records: int) -> dict[str, object]:
    with AdminClient(cluster.bootstrap_servers) as admin:
        admin.create_topic("rf1", partitions=1, replication_factor=1)
        admin.create_topic(
            "rf3", partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"}
        )
    rows = {}
    for name, topic, acks in (("RF=1 acks=1", "rf1", "1"), ("RF=3 acks=all", "rf3", "all")):
        rows[name] = _bench(
            cluster.bootstrap_servers,
            "produce",
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            "1024",
            "--acks",
            acks,
        )
    return {
        "rows": rows,
        "ratio": rows["RF=3 acks=all"]["mbs"] / rows["RF=1 acks=1"]["mbs"],
    }


def _leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    """Partition -> leader id (-1 none); empty until the topic's metadata has propagated."""
    try:
        (desc,) = admin.describe_topics([topic])
    except UnknownTopicOrPartitionError:
        return {}
    return {p.partition: p.leader for p in desc.partitions}


def failover(cluster: LocalCluster, partitions: int = 100) -> dict[str, object]:
    with AdminClient(cluster.bootstrap_servers) as admin:
        admin.create_topic(
            "failover",
            partitions=partitions,
            replication_factor=3,
            configs={"min.insync.replicas": "2"},
        )
        deadline = time.monotonic() + 60
        while True:
            leaders = _leaders(admin, "failover")
            ready = len(leaders) == partitions and all(v >= 0 for v in leaders.values())
            if ready or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    counts: dict[int, int] = {}
    for leader in leaders.values():
        counts[leader] = counts.get(leader, 0) + 1
    victim = max(counts, key=lambda b: counts[b])
    affected = sorted(p for p, leader in leaders.items() if leader == victim)
    survivors = ",".join(proc.address for bid, proc in cluster.brokers.items() if bid != victim)

    t0 = time.monotonic()
    cluster.kill_broker(victim)
    with AdminClient(survivors) as admin:
        deadline = t0 + 120
        while True:
            now = _leaders(admin, "failover")
            if now and all(now[p] >= 0 and now[p] != victim for p in affected):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no new leaders after 120 s: {now}")
            time.sleep(0.02)
    t_elected = time.monotonic() - t0
    with Producer(survivors, acks="all") as producer:
        futures = [producer.send("failover", b"after", partition=p) for p in affected]
        producer.flush()
        for f in futures:
            f.result(timeout=60)
    t_writable = time.monotonic() - t0
    return {
        "partitions": partitions,
        "killed_broker": victim,
        "partitions_led_by_killed_broker": len(affected),
        "seconds_until_new_leaders": t_elected,
        "seconds_until_acks_all_write_ok": t_writable,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--session-timeout-s", type=int, default=None)
    args = parser.parse_args()
    result: dict[str, object] = {"machine": machine()}
    with tempfile.TemporaryDirectory(prefix="hw-repl-") as tmp:
        flags = _broker_flags(args.session_timeout_s)
        with LocalCluster(Path(tmp) / "c1", brokers=3, broker_args=flags) as cluster:
            result["throughput"] = throughput_ratio(cluster, args.records)
        with LocalCluster(Path(tmp) / "c2", brokers=3, broker_args=flags) as cluster:
            result["failover"] = failover(cluster)
    result["broker_flags"] = flags
    result["pid"] = os.getpid()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
