"""Consumer groups end to end: real AsyncConsumer members against real coordinators.

One module-scoped cluster (etcd, a controller, one broker, 2 coordinators, 3 offsets
partitions). Members run a task that keeps calling ``poll`` and records, Kafka
"verifiable consumer" style, every rebalance callback (generation, member, assignment) and
every record returned, checking each belongs to the member's assignment at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer, RebalanceListener
from headwater.client.types import TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.errors import FencedInstanceIdError, HeadwaterError
from tests.helpers.wait import async_wait_for

OFFSETS_PARTITIONS = 3


@pytest.fixture(scope="module")
def gcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("groups-int")
    with LocalCluster(
        data_dir,
        brokers=1,
        controllers=1,
        coordinators=2,
        coordinator_args=[
            "--offsets-topic-partitions",
            str(OFFSETS_PARTITIONS),
            "--lease-ttl",
            "2",
        ],
        etcd_unsafe_no_fsync=True,
    ) as c:
        yield c


class Member:
    """One group member driven by a poll task; records callbacks and consumed records."""

    def __init__(self, name: str, boot: str, group: str, topic: str, **kw: Any) -> None:
        self.name = name
        self.topic = topic
        kw.setdefault("session_timeout_ms", 6000)
        kw.setdefault("heartbeat_interval_ms", 500)
        kw.setdefault("enable_auto_commit", False)
        self.c = AsyncConsumer(
            boot, group_id=group, auto_offset_reset="earliest", client_id=name, **kw
        )
        # (kind, generation, partitions passed, full assignment after the callback)
        self.events: list[
            tuple[str, int, frozenset[TopicPartition], frozenset[TopicPartition]]
        ] = []
        self.records: list[tuple[float, TopicPartition, int]] = []
        self.violations: list[str] = []
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None

    def _cb(self, kind: str) -> Any:
        def fn(tps: set[TopicPartition]) -> None:
            after = set(self.c.assignment())
            if kind != "assigned":
                after -= tps
            self.events.append((kind, self.c.generation, frozenset(tps), frozenset(after)))

        return fn

    def start(self) -> None:
        self.c.subscribe(
            [self.topic],
            listener=RebalanceListener(
                on_assigned=self._cb("assigned"),
                on_revoked=self._cb("revoked"),
                on_lost=self._cb("lost"),
            ),
        )
        self.task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        last: dict[TopicPartition, int] = {}
        try:
            while True:
                recs = await self.c.poll(timeout_ms=200)
                owned = self.c.assignment()
                now = time.monotonic()
                for r in recs:
                    tp = TopicPartition(r.topic, r.partition)
                    if tp not in owned:
                        self.violations.append(f"{self.name}: {tp} offset {r.offset} not assigned")
                    prev = last.get(tp)
                    if prev is not None and r.offset != prev + 1 and r.offset > prev:
                        self.violations.append(f"{self.name}: {tp} jumped {prev} -> {r.offset}")
                    last[tp] = r.offset
                    self.records.append((now, tp, r.offset))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.error = exc

    async def stop(self, leave: bool = True) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        if leave:
            await self.c.close()

    def stable(self) -> bool:
        g = self.c._group
        return g is not None and g.stable and g.join_task is None and not g.rejoin_needed


def all_parts(topic: str, n: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


def settled(members: list[Member], topic: str, n: int) -> bool:
    """Every member stable in the same generation, assignments partitioning the topic."""
    if not all(m.stable() for m in members):
        return False
    if len({m.c.generation for m in members}) != 1:
        return False
    sets = [m.c.assignment() for m in members]
    union = set().union(*sets)
    return union == all_parts(topic, n) and sum(len(s) for s in sets) == n


def check_ownership(members: list[Member]) -> None:
    """Each partition owned by at most one member per generation (from the callbacks)."""
    owners: dict[tuple[int, TopicPartition], str] = {}
    for m in members:
        for kind, gen, _tps, after in m.events:
            if kind != "assigned":
                continue
            for tp in after:
                prev = owners.setdefault((gen, tp), m.name)
                assert prev == m.name, f"{tp} owned by {prev} and {m.name} in generation {gen}"
        assert not m.violations, m.violations
        assert m.error is None, m.error


async def produce(boot: str, topic: str, partitions: int, per_partition: int) -> None:
    async with AsyncAdminClient(boot) as admin:
        await admin.create_topic(topic, partitions)
    async with AsyncProducer(boot) as p:
        for part in range(partitions):
            vals = [b"%d-%d" % (part, i) for i in range(per_partition)]
            await (await p.send_many(topic, vals, partition=part))


def consumed_offsets(members: list[Member]) -> dict[TopicPartition, set[int]]:
    out: dict[TopicPartition, set[int]] = {}
    for m in members:
        for _t, tp, off in m.records:
            out.setdefault(tp, set()).add(off)
    return out


@pytest.mark.parametrize(
    ("strategy", "n_members", "n_parts"),
    [("range", 3, 6), ("cooperative-sticky", 2, 4)],
)
def test_members_split_partitions_and_commit(
    gcluster: LocalCluster, strategy: str, n_members: int, n_parts: int
) -> None:
    boot = gcluster.bootstrap
    topic = f"split-{strategy}"
    group = f"g-split-{strategy}"
    per = 20

    async def body() -> None:
        await produce(boot, topic, n_parts, per)
        members = [
            Member(f"m{i}", boot, group, topic, partition_assignment_strategy=[strategy])
            for i in range(n_members)
        ]
        try:
            for m in members:
                m.start()

            async def ready() -> bool:
                return settled(members, topic, n_parts)

            await async_wait_for(ready, timeout=60, what="a stable group")
            # the callbacks replay to each member's assignment (which partition the topic)
            for m in members:
                owned: set[TopicPartition] = set()
                for kind, _gen, tps, _after in m.events:
                    owned = owned | tps if kind == "assigned" else owned - tps
                assert owned == m.c.assignment(), (m.name, m.events)

            async def all_read() -> bool:
                got = consumed_offsets(members)
                return all(len(got.get(tp, ())) == per for tp in all_parts(topic, n_parts))

            await async_wait_for(all_read, timeout=60, what="every record consumed")
            check_ownership(members)
            # consumption continues: new records reach their owners
            async with AsyncProducer(boot) as p:
                for part in range(n_parts):
                    await (await p.send_many(topic, [b"late"], partition=part))

            async def late_read() -> bool:
                got = consumed_offsets(members)
                return all(per in got.get(tp, ()) for tp in all_parts(topic, n_parts))

            await async_wait_for(late_read, timeout=30, what="records produced after joining")
            for m in members:
                owned = m.c.assignment()
                assert owned, f"{m.name} got nothing"
                await m.c.commit()
                committed = await m.c.committed(owned)
                for tp in owned:
                    pos = await m.c.position(tp)
                    assert committed[tp] == pos == per + 1, (tp, committed[tp], pos)
            check_ownership(members)
        finally:
            for m in members:
                await m.stop()

    asyncio.run(body())


CHILD = r"""
import asyncio, sys
from headwater.client import AsyncConsumer, RebalanceListener

async def main(boot, group, topic):
    c = AsyncConsumer(boot, group_id=group, auto_offset_reset="earliest",
                      session_timeout_ms=3000, heartbeat_interval_ms=500,
                      enable_auto_commit=False, client_id="child")
    def assigned(tps):
        print("ASSIGNED", " ".join(str(tp.partition) for tp in sorted(c.assignment())), flush=True)
    c.subscribe([topic], listener=RebalanceListener(on_assigned=assigned))
    committed = False
    while True:
        recs = await c.poll(timeout_ms=200, max_records=3)
        for r in recs:
            print("CONSUMED", r.partition, r.offset, flush=True)
        if recs and not committed:
            await c.commit()
            done = {tp.partition: await c.position(tp) for tp in c.assignment()}
            print("COMMITTED", " ".join(f"{p}:{o}" for p, o in sorted(done.items())), flush=True)
            committed = True

asyncio.run(main(*sys.argv[1:]))
"""


def test_member_crash_partitions_resume_from_last_commit(gcluster: LocalCluster) -> None:
    """SIGKILL a member (no LeaveGroup): the survivor takes its partitions within about the
    session timeout and reads them from the dead member's last commit."""
    boot = gcluster.bootstrap
    topic, group, n_parts, per = "crash", "g-crash", 4, 30

    async def body() -> None:
        await produce(boot, topic, n_parts, per)
        survivor = Member("survivor", boot, group, topic, session_timeout_ms=3000)
        survivor.start()
        await async_wait_for(
            lambda: _true(settled([survivor], topic, n_parts)), timeout=60, what="survivor"
        )
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, boot, group, topic,
            stdout=asyncio.subprocess.PIPE, cwd=str(Path(__file__).resolve().parents[2]),
        )  # fmt: skip
        lines: list[list[str]] = []

        async def read() -> None:
            assert child.stdout is not None
            async for raw in child.stdout:
                lines.append(raw.decode().split())

        reader = asyncio.get_running_loop().create_task(read())
        try:

            async def child_progressed() -> bool:
                commits = [ln for ln in lines if ln[0] == "COMMITTED"]
                if not commits or not survivor.stable():
                    return False
                after = lines.index(commits[0])
                return any(ln[0] == "CONSUMED" for ln in lines[after + 1 :])

            await async_wait_for(child_progressed, timeout=60, what="the child to commit")
            child_parts = {
                TopicPartition(topic, int(p))
                for p in [ln for ln in lines if ln[0] == "ASSIGNED"][-1][1:]
            }
            commit_line = next(ln for ln in lines if ln[0] == "COMMITTED")
            committed = {
                TopicPartition(topic, int(p)): int(o)
                for p, o in (x.split(":") for x in commit_line[1:])
            }
            assert child_parts and set(committed) == child_parts
            assert survivor.c.assignment() == all_parts(topic, n_parts) - child_parts
            child.kill()  # SIGKILL: no LeaveGroup, no commit
            await child.wait()
            killed_at = time.monotonic()

            async def taken_over() -> bool:
                return settled([survivor], topic, n_parts)

            await async_wait_for(taken_over, timeout=30, what="the survivor to take over")
            took = time.monotonic() - killed_at
            print(f"rebalance after SIGKILL took {took:.2f}s (session timeout 3s)")
            assert took < 3 + 10, took

            async def reread() -> bool:
                got = {tp for t, tp, _o in survivor.records if t > killed_at}
                return child_parts <= got

            await async_wait_for(reread, timeout=30, what="the dead member's partitions re-read")
            for tp in child_parts:
                first = next(o for t, p, o in survivor.records if t > killed_at and p == tp)
                assert first == committed[tp], (tp, first, committed[tp])
            # committed offsets never move backwards across the handover
            await survivor.c.commit()
            after = await survivor.c.committed(child_parts)
            for tp in child_parts:
                assert (after[tp] or -1) >= committed[tp], (tp, after[tp], committed[tp])
            check_ownership([survivor])
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await survivor.stop()

    asyncio.run(body())


async def _true(value: bool) -> bool:
    return value


def test_static_member_restart_without_rebalance_and_duplicate_fenced(
    gcluster: LocalCluster,
) -> None:
    """A static member closed (no LeaveGroup) and restarted within the session timeout
    keeps the generation and its partitions; a second live member with the same instance id
    fences the older one (FencedInstanceIdError from its poll)."""
    boot = gcluster.bootstrap
    topic, group, n_parts = "static", "g-static", 4

    async def body() -> None:
        await produce(boot, topic, n_parts, 5)

        def member(name: str, instance: str) -> Member:
            return Member(name, boot, group, topic, group_instance_id=instance)

        a, b = member("a", "inst-a"), member("b", "inst-b")
        started = [a, b]
        try:
            # a alone first, then b: a's last JoinGroup reports what it owned, which its
            # restarted process cannot know (the restart must not rebalance anyway)
            a.start()
            await async_wait_for(
                lambda: _true(settled([a], topic, n_parts)), timeout=60, what="a stable"
            )
            b.start()
            await async_wait_for(
                lambda: _true(settled([a, b], topic, n_parts)), timeout=60, what="stable"
            )
            gen, a_parts, b_events = a.c.generation, a.c.assignment(), len(b.events)
            await a.stop()  # static: revokes locally, sends no LeaveGroup
            a2 = member("a2", "inst-a")
            started.append(a2)
            a2.start()
            await async_wait_for(
                lambda: _true(settled([a2, b], topic, n_parts)), timeout=30, what="a2 stable"
            )
            assert a2.c.generation == gen == b.c.generation
            assert a2.c.assignment() == a_parts
            assert b.events[b_events:] == [], b.events[b_events:]  # b saw no rebalance
            a3 = member("a3", "inst-a")
            started.append(a3)
            a3.start()

            async def fenced() -> bool:
                return a2.error is not None

            await async_wait_for(fenced, timeout=30, what="a2 fenced")
            assert isinstance(a2.error, FencedInstanceIdError), repr(a2.error)
            await async_wait_for(
                lambda: _true(settled([a3, b], topic, n_parts)), timeout=30, what="a3 stable"
            )
            assert a3.c.assignment() == a_parts
            for m in (a, b, a3):
                assert not m.violations and m.error is None, (m.name, m.violations, m.error)
        finally:
            for m in started:
                with contextlib.suppress(HeadwaterError):
                    await m.stop()

    asyncio.run(body())


def test_cooperative_join_keeps_unaffected_partitions(gcluster: LocalCluster) -> None:
    """2 cooperative-sticky members on 6 partitions, a 3rd joins while records flow: the
    partitions that stay with their owner are never revoked; the pause per partition (the
    longest gap between records consumed, while producing every 50 ms) is printed."""
    boot = gcluster.bootstrap
    topic, group, n_parts = "coop", "g-coop", 6

    async def body() -> None:
        await produce(boot, topic, n_parts, 1)

        def member(name: str) -> Member:
            return Member(
                name, boot, group, topic, partition_assignment_strategy=["cooperative-sticky"]
            )

        a, b, c = member("a"), member("b"), member("c")
        stop = asyncio.Event()
        sent = {p: 1 for p in range(n_parts)}

        async def feed() -> None:
            async with AsyncProducer(boot) as p:
                while not stop.is_set():
                    futs = [await p.send(topic, b"x", partition=q) for q in range(n_parts)]
                    await asyncio.gather(*futs)
                    for q in range(n_parts):
                        sent[q] += 1
                    await asyncio.sleep(0.05)

        feeder: asyncio.Task[None] | None = None
        try:
            a.start()
            b.start()
            await async_wait_for(
                lambda: _true(settled([a, b], topic, n_parts)), timeout=60, what="a, b stable"
            )
            before = {m.name: m.c.assignment() for m in (a, b)}
            seen = {m.name: len(m.events) for m in (a, b)}
            feeder = asyncio.get_running_loop().create_task(feed())
            await async_wait_for(
                lambda: _true(all(v > 10 for v in sent.values())), timeout=30, what="traffic"
            )
            joined_at = time.monotonic()
            c.start()
            await async_wait_for(
                lambda: _true(settled([a, b, c], topic, n_parts)), timeout=60, what="3 stable"
            )
            settled_at = time.monotonic()
            after = {m.name: m.c.assignment() for m in (a, b, c)}
            kept = {tp for n in ("a", "b") for tp in before[n] & after[n]}
            assert len(kept) == 4 and len(after["c"]) == 2, (before, after)
            for m in (a, b):
                revoked = {
                    tp
                    for e in m.events[seen[m.name] :]
                    if e[0] in ("revoked", "lost")
                    for tp in e[2]
                }
                assert not revoked & kept, (m.name, revoked)
                assert revoked == before[m.name] - after[m.name]
            await async_wait_for(
                lambda: _true(all(v > 40 for v in sent.values())), timeout=30, what="traffic"
            )
            stop.set()
            await feeder

            async def drained() -> bool:
                got = consumed_offsets([a, b, c])
                return all(
                    got.get(TopicPartition(topic, q), set()) >= set(range(sent[q]))
                    for q in range(n_parts)
                )

            await async_wait_for(drained, timeout=30, what="every record consumed")
            check_ownership([a, b, c])
            pauses = {}
            for tp in sorted(all_parts(topic, n_parts)):
                times = sorted(
                    t for m in (a, b, c) for t, p, _o in m.records
                    if p == tp and joined_at - 1 <= t <= settled_at + 1
                )  # fmt: skip
                pauses[tp.partition] = max(
                    (y - x for x, y in itertools.pairwise(times)), default=0.0
                )
            print(
                f"rebalance took {settled_at - joined_at:.2f}s; pause per partition (s): "
                + ", ".join(
                    f"{p}{'*' if TopicPartition(topic, p) in kept else ''}={d:.2f}"
                    for p, d in sorted(pauses.items())
                )
                + " (* kept by its owner)"
            )
            assert all(pauses[tp.partition] < 2.0 for tp in kept), pauses
        finally:
            stop.set()
            if feeder is not None:
                await asyncio.gather(feeder, return_exceptions=True)
            for m in (a, b, c):
                await m.stop()

    asyncio.run(body())


def test_pattern_subscription_consumes_every_matching_topic(gcluster: LocalCluster) -> None:
    """subscribe(pattern=...) joins for the topics that match, and only those."""
    boot = gcluster.bootstrap
    topics = ("pat-a", "pat-b", "other-c")

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            for t in topics:
                await admin.create_topic(t, 1)
        async with AsyncProducer(boot) as p:
            for t in topics:
                await (await p.send(t, t.encode()))
        c = AsyncConsumer(
            boot,
            group_id="g-pattern",
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            enable_auto_commit=False,
            client_id="pattern",
        )
        try:
            c.subscribe(pattern=r"pat-.*")
            got: dict[str, bytes | None] = {}
            deadline = time.monotonic() + 30
            while len(got) < 2 and time.monotonic() < deadline:
                for r in await c.poll(timeout_ms=200):
                    got[r.topic] = r.value
            assert got == {"pat-a": b"pat-a", "pat-b": b"pat-b"}
            assert {tp.topic for tp in c.assignment()} == {"pat-a", "pat-b"}
        finally:
            await c.close()

    asyncio.run(body())


def test_assigned_consumer_with_group_id_commits_without_joining(gcluster: LocalCluster) -> None:
    """``assign`` + ``group_id`` (Kafka's manual assignment with committed offsets): poll
    keeps the manual assignment, commits go in with generation -1, and the group never gets
    a member."""
    boot = gcluster.bootstrap

    async def run() -> None:
        await produce(boot, "manual-assign", 2, 5)
        tps = [TopicPartition("manual-assign", p) for p in range(2)]
        async with AsyncConsumer(
            boot, group_id="manual", enable_auto_commit=False, auto_offset_reset="earliest"
        ) as c:
            c.assign(tps)
            assert await c.committed(tps) == {tp: None for tp in tps}
            got: list[int] = []
            while len(got) < 10:
                records = await c.poll(timeout_ms=5_000)
                assert records, "no records for an assigned partition"
                got += [r.offset for r in records]
            assert c.assignment() == set(tps), "poll replaced the manual assignment"
            await c.commit({tps[0]: 5, tps[1]: 3})
            assert await c.committed(tps) == {tps[0]: 5, tps[1]: 3}
        async with AsyncAdminClient(boot) as admin:
            (desc,) = await admin.describe_groups(["manual"])
            assert desc.members == ()

    asyncio.run(run())
