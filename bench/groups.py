"""Consumer-group benchmarks (issue 4), one run, one machine, for docs/benchmarks.md.

1. Rebalance: a group of 9 members consuming a 100-partition topic is joined by a 10th
   member; measured from the 10th member's subscribe until every partition is assigned to
   exactly one member again, for an eager protocol (range) and for cooperative-sticky, with
   how many partitions were revoked from members that kept running (eager: all of them;
   cooperative: only the ones that move).
2. Commit throughput: one member commits offsets for all its partitions in a loop
   (commits/s, partition offsets/s).

    python bench/groups.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from headwater.client import AdminClient, AsyncConsumer, Producer, TopicPartition
from headwater.client.group import RebalanceListener
from headwater.dev.cluster import LocalCluster

PARTITIONS = 100
MEMBERS = 10


class Member:
    """One consumer in the group and what it owns, as its rebalance callbacks report."""

    def __init__(self, bootstrap: str, group: str, strategy: str) -> None:
        self.owned: set[TopicPartition] = set()
        self.revoked = 0
        self.consumer = AsyncConsumer(
            bootstrap,
            group_id=group,
            partition_assignment_strategy=[strategy],
            session_timeout_ms=10_000,
            heartbeat_interval_ms=300,
            auto_offset_reset="earliest",
        )
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def _assigned(self, tps: set[TopicPartition]) -> None:
        self.owned |= set(tps)

    def _revoked(self, tps: set[TopicPartition]) -> None:
        self.revoked += len(tps)
        self.owned -= set(tps)

    async def _run(self, topic: str) -> None:
        self.consumer.subscribe(
            [topic],
            listener=RebalanceListener(
                on_assigned=self._assigned, on_revoked=self._revoked, on_lost=self._revoked
            ),
        )
        while not self.stop.is_set():
            await self.consumer.poll(timeout_ms=50)

    def start(self, topic: str) -> None:
        self.task = asyncio.create_task(self._run(topic))

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 30)
        await self.consumer.close()


def _complete(members: list[Member]) -> bool:
    owned = [tp for m in members for tp in m.owned]
    return (
        len(owned) == PARTITIONS and len(set(owned)) == PARTITIONS and all(m.owned for m in members)
    )


async def _wait_complete(members: list[Member], timeout: float) -> float:
    t0 = time.monotonic()
    while not _complete(members):
        if time.monotonic() - t0 > timeout:
            raise RuntimeError("group did not settle: " + str([len(m.owned) for m in members]))
        await asyncio.sleep(0.005)
    return time.monotonic() - t0


async def rebalance(bootstrap: str, topic: str, strategy: str) -> dict[str, float]:
    group = f"bench-{strategy}"
    members = [Member(bootstrap, group, strategy) for _ in range(MEMBERS - 1)]
    for m in members:
        m.start(topic)
    try:
        await _wait_complete(members, 120)
        await asyncio.sleep(1.0)  # let the group settle into Stable
        revoked_before = sum(m.revoked for m in members)
        newcomer = Member(bootstrap, group, strategy)
        newcomer.start(topic)
        members.append(newcomer)
        seconds = await _wait_complete(members, 120)
        revoked = sum(m.revoked for m in members[:-1]) - revoked_before
        commits = await commit_throughput(members[0])
        return {"seconds": seconds, "partitions_revoked_from_running_members": revoked, **commits}
    finally:
        for m in members:
            await m.close()


async def commit_throughput(member: Member, seconds: float = 3.0) -> dict[str, float]:
    tps = sorted(member.owned)
    n = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        await member.consumer.commit({tp: n + 1 for tp in tps})
        n += 1
    elapsed = time.monotonic() - t0
    return {
        "commits_per_s": n / elapsed,
        "partition_offsets_per_s": n * len(tps) / elapsed,
        "partitions_per_commit": len(tps),
    }


def main() -> None:
    result: dict[str, object] = {}
    with (
        tempfile.TemporaryDirectory(prefix="hw-groups-") as tmp,
        LocalCluster(Path(tmp) / "c", brokers=1, coordinators=2) as cluster,
    ):
        boot = cluster.bootstrap_servers
        with AdminClient(boot) as admin:
            admin.create_topic("g100", partitions=PARTITIONS)
        with Producer(boot) as producer:
            for p in range(PARTITIONS):
                producer.send_many("g100", [b"x" * 100] * 100, partition=p)
            producer.flush()
        for strategy in ("range", "cooperative-sticky"):
            result[strategy] = asyncio.run(rebalance(boot, "g100", strategy))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
