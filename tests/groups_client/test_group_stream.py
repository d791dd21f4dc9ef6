"""The group stream (GroupStreamService.Consume) against a real cluster: a stream member alone
and together with a classic Python consumer in one group, credit, formats, liveness and bad
input.

One module-scoped cluster (etcd, a controller, one broker, one coordinator). A
:class:`StreamMember` drives one stream from the test: it sends what the test queues and
records every response with the time it arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from headwater import errors
from headwater.batch import decode_batches
from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer, RebalanceListener
from headwater.client.types import TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.v1 import group_stream_pb2 as gs
from headwater.v1 import group_stream_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from tests.helpers.wait import async_wait_for

SESSION_MS = 3000


@pytest.fixture(scope="module")
def scluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("group-stream")
    with LocalCluster(
        data_dir,
        brokers=1,
        controllers=1,
        coordinators=1,
        coordinator_args=["--offsets-topic-partitions", "2"],
        etcd_unsafe_no_fsync=True,
    ) as c:
        yield c


class StreamMember:
    """One group stream: ``send`` queues a request, ``responses`` holds (time, response)."""

    def __init__(self, boot: str, open_: gs.ConsumeOpen, *, keep_alive: bool = True) -> None:
        self.channel = grpc.aio.insecure_channel(boot)
        self.stub = group_stream_pb2_grpc.GroupStreamServiceStub(self.channel)
        self.outbox: asyncio.Queue[gs.ConsumeRequest | None] = asyncio.Queue()
        self.outbox.put_nowait(gs.ConsumeRequest(open=open_))
        self.responses: list[tuple[float, gs.ConsumeResponse]] = []
        self.error: errors.HeadwaterError | None = None
        self.ended = asyncio.Event()
        self.call = self.stub.Consume(self._requests())
        loop = asyncio.get_running_loop()
        self.task = loop.create_task(self._read())
        self.alive = loop.create_task(self._keep_alive()) if keep_alive else None

    async def _keep_alive(self) -> None:
        """A live client: a KeepAlive every sixth of the session timeout."""
        while True:
            await asyncio.sleep(SESSION_MS / 6000)
            self.send(keep_alive=gs.ConsumeKeepAlive())

    def go_silent(self) -> None:
        """Stop sending anything (the stream stays open): a client that died without closing."""
        if self.alive is not None:
            self.alive.cancel()

    async def _requests(self) -> AsyncIterator[gs.ConsumeRequest]:
        while True:
            req = await self.outbox.get()
            if req is None:
                return
            yield req

    async def _read(self) -> None:
        try:
            async for resp in self.call:
                self.responses.append((time.monotonic(), resp))
        except grpc.RpcError as exc:
            self.error = errors.from_rpc_error(exc)
        finally:
            self.ended.set()

    def send(self, **kw: Any) -> None:
        self.outbox.put_nowait(gs.ConsumeRequest(**kw))

    def close_side(self) -> None:
        self.outbox.put_nowait(None)

    async def close(self) -> None:
        self.go_silent()
        self.close_side()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ended.wait(), 15)
        self.call.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.channel.close()

    # ------------------------------------------------------------ views

    def assignments(self) -> list[gs.ConsumeAssignment]:
        return [r.assignment for _, r in self.responses if r.WhichOneof("response") == "assignment"]

    def assigned(self) -> set[TopicPartition]:
        a = self.assignments()
        return {TopicPartition(p.topic, p.partition) for p in a[-1].partitions} if a else set()

    def records(self) -> list[tuple[float, int, TopicPartition, int, bytes]]:
        """(arrival, generation, partition, offset, value) of every record received."""
        out = []
        for t, r in self.responses:
            if r.WhichOneof("response") == "records":
                tp = TopicPartition(r.records.topic, r.records.partition)
                for rec in r.records.records:
                    out.append((t, r.records.generation_id, tp, rec.offset, rec.value))
        return out

    def commit_results(self) -> dict[int, gs.ConsumeCommitResult]:
        return {
            r.commit_result.commit_id: r.commit_result
            for _, r in self.responses
            if r.WhichOneof("response") == "commit_result"
        }

    async def commit(self, commit_id: int, offsets: dict[TopicPartition, int]) -> Any:
        self.send(
            commit=gs.ConsumeCommit(
                commit_id=commit_id,
                offsets=[
                    gs.ConsumeCommitOffset(topic=tp.topic, partition=tp.partition, offset=o)
                    for tp, o in offsets.items()
                ],
            )
        )

        async def answered() -> gs.ConsumeCommitResult | None:
            return self.commit_results().get(commit_id)

        res = await async_wait_for(answered, timeout=30, what=f"commit {commit_id} answered")
        assert self.error is None, self.error
        return res

    def positions(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for _t, _g, tp, off, _v in self.records():
            out[tp] = max(out.get(tp, 0), off + 1)
        return out


def open_msg(group: str, topics: list[str], **kw: Any) -> gs.ConsumeOpen:
    kw.setdefault("session_timeout_ms", SESSION_MS)
    kw.setdefault("offset_reset", gs.OFFSET_RESET_EARLIEST)
    return gs.ConsumeOpen(group_id=group, topics=topics, **kw)


async def create_and_produce(boot: str, topic: str, partitions: int, per: int) -> None:
    async with AsyncAdminClient(boot) as admin:
        await admin.create_topic(topic, partitions)
    await produce(boot, topic, partitions, per, 0)


async def produce(boot: str, topic: str, partitions: int, per: int, start: int) -> None:
    async with AsyncProducer(boot) as p:
        for part in range(partitions):
            vals = [b"%d-%d" % (part, i) for i in range(start, start + per)]
            await (await p.send_many(topic, vals, partition=part))


async def group_members(boot: str, group: str) -> int:
    async with AsyncAdminClient(boot) as admin:
        (d,) = await admin.describe_groups([group])
        return len(d.members)


def all_parts(topic: str, n: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


def test_stream_assignment_records_commit_and_leave(scluster: LocalCluster) -> None:
    """Open -> Assignment -> Records -> Commit -> CommitResult; the committed offsets are the
    group's; closing the client's side removes the member at once."""
    boot = scluster.bootstrap
    topic, group = "gs-basic", "g-gs-basic"

    async def body() -> None:
        await create_and_produce(boot, topic, 2, 10)
        s = StreamMember(boot, open_msg(group, [topic], member_id="m-basic", credit_records=100))
        try:

            async def all_records() -> bool:
                return len(s.records()) == 20 or s.ended.is_set()

            await async_wait_for(all_records, timeout=60, what="20 records on the stream")
            assert s.error is None, s.error
            (a,) = s.assignments()
            assert a.member_id == "m-basic" and a.generation_id >= 1
            assert {(p.topic, p.partition, p.committed_offset) for p in a.partitions} == {
                (topic, 0, -1),
                (topic, 1, -1),
            }
            got = sorted((tp.partition, off, v) for _t, _g, tp, off, v in s.records())
            assert got == [(p, i, b"%d-%d" % (p, i)) for p in range(2) for i in range(10)]
            assert {g for _t, g, *_ in s.records()} == {a.generation_id}
            res = await s.commit(1, {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 7})
            assert res.error_code == ErrorCode.NONE
            assert sorted((p.partition, p.error_code) for p in res.partitions) == [
                (0, ErrorCode.NONE),
                (1, ErrorCode.NONE),
            ]
            # a partition this member is not assigned: refused, never committed
            res = await s.commit(2, {TopicPartition(topic, 5): 3})
            assert [(p.partition, p.error_code) for p in res.partitions] == [
                (5, ErrorCode.ILLEGAL_GENERATION)
            ]
            assert await group_members(boot, group) == 1
        finally:
            await s.close()
        assert s.error is None, s.error
        # LeaveGroup with the instance id: the static member is gone without a session timeout
        assert await group_members(boot, group) == 0
        async with AsyncConsumer(boot, group_id=group) as c:
            committed = await c.committed(all_parts(topic, 2))
        assert committed == {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 7}

    asyncio.run(body())


class Classic:
    """A classic member (AsyncConsumer with group_id, range) polling in a task; records each
    callback and record with its arrival time, and commits what it consumed after each poll."""

    def __init__(self, boot: str, group: str, topic: str) -> None:
        self.c = AsyncConsumer(
            boot,
            group_id=group,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=300,
            partition_assignment_strategy=["range"],
            enable_auto_commit=False,
            client_id="classic",
        )
        self.topic = topic
        # (time, kind, generation, partitions)
        self.events: list[tuple[float, str, int, frozenset[TopicPartition]]] = []
        self.records: list[tuple[float, int, TopicPartition, int]] = []
        self.first_after: dict[TopicPartition, int] = {}
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None

    def _cb(self, kind: str) -> Any:
        def fn(tps: set[TopicPartition]) -> None:
            self.events.append((time.monotonic(), kind, self.c.generation, frozenset(tps)))

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
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while True:
                recs = await self.c.poll(timeout_ms=100)
                now = time.monotonic()
                done: dict[TopicPartition, int] = {}
                for r in recs:
                    tp = TopicPartition(r.topic, r.partition)
                    self.records.append((now, self.c.generation, tp, r.offset))
                    done[tp] = r.offset + 1
                if done:
                    with contextlib.suppress(errors.HeadwaterError):
                        await self.c.commit(done)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.error = exc

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.c.close()


def test_stream_and_classic_members_share_a_group(scluster: LocalCluster) -> None:
    """A stream member and a classic consumer split the partitions and together see every
    record; no partition is delivered to both at once across the rebalance; the stream member
    that stops sending is removed after its session timeout (DEADLINE_EXCEEDED) and the
    classic member resumes its partitions from the offsets it committed."""
    boot = scluster.bootstrap
    topic, group, n = "gs-mixed", "g-gs-mixed", 4

    async def body() -> None:
        await create_and_produce(boot, topic, n, 25)
        s = StreamMember(boot, open_msg(group, [topic], member_id="m-mixed", credit_records=10_000))
        classic = Classic(boot, group, topic)
        try:
            # the stream member alone owns everything and reads it all
            async def alone() -> bool:
                return s.assigned() == all_parts(topic, n) and len(s.records()) == 100

            await async_wait_for(alone, timeout=60, what="the stream member reading alone")
            await s.commit(1, s.positions())
            # records keep arriving while the classic member joins: an eager rebalance splits
            # the partitions under traffic
            stop = asyncio.Event()
            trickle = asyncio.get_running_loop().create_task(_trickle(boot, topic, n, stop))
            classic.start()

            async def split() -> bool:
                mine, theirs = s.assigned(), set(classic.c.assignment())
                return (
                    len(s.assignments()) >= 2
                    and bool(mine)
                    and bool(theirs)
                    and not classic.c.rebalancing
                    and s.assignments()[-1].generation_id == classic.c.generation
                    and mine | theirs == all_parts(topic, n)
                    and not mine & theirs
                )

            await async_wait_for(split, timeout=60, what="the partitions split between the two")
            await produce(boot, topic, n, 25, 25)
            stop.set()
            await trickle
            async with AsyncConsumer(boot) as probe:
                ends = await probe.end_offsets(all_parts(topic, n))
            total = sum(ends.values())
            assert total > 200  # the trickle ran during the rebalance

            async def all_seen() -> bool:
                seen = {(tp, off) for _t, _g, tp, off, _v in s.records()}
                seen |= {(tp, off) for _t, _g, tp, off in classic.records}
                return len(seen) == total

            await async_wait_for(all_seen, timeout=60, what="every record seen by the two")
            res = await s.commit(2, s.positions())
            mine = s.assigned()
            assert {(p.topic, p.partition) for p in res.partitions} == {
                (tp.topic, tp.partition) for tp in s.positions()
            }
            for p in res.partitions:  # partitions given up in the rebalance: refused
                tp = TopicPartition(p.topic, p.partition)
                want = ErrorCode.NONE if tp in mine else ErrorCode.ILLEGAL_GENERATION
                assert p.error_code == want, (tp, p)
            committed_by_stream = {tp: s.positions()[tp] for tp in mine}
            # the stream member goes silent: removed after its session timeout
            s.go_silent()
            await async_wait_for(
                lambda: _ended(s), timeout=SESSION_MS / 1000 + 30, what="the stream to end"
            )
            assert isinstance(s.error, errors.RequestTimedOutError), s.error
            assert await s.call.code() == grpc.StatusCode.DEADLINE_EXCEEDED

            async def took_over() -> bool:
                return set(classic.c.assignment()) == all_parts(topic, n) and not (
                    classic.c.rebalancing
                )

            await async_wait_for(took_over, timeout=60, what="the classic member owning all")
            taken_at = max(t for t, kind, *_ in classic.events if kind == "assigned")
            await produce(boot, topic, n, 5, 50)

            async def resumed() -> bool:
                got = {tp for t, _g, tp, _o in classic.records if t >= taken_at}
                return mine <= got

            await async_wait_for(resumed, timeout=60, what="the classic member reading them")
            for tp in mine:  # resumed exactly where the stream member committed
                first = min(o for t, _g, p, o in classic.records if p == tp and t >= taken_at)
                assert first == committed_by_stream[tp], (tp, first, committed_by_stream)
            assert classic.error is None, classic.error
            check_no_overlap(s, classic)
        finally:
            await classic.stop()
            await s.close()

    asyncio.run(body())


async def _trickle(boot: str, topic: str, n: int, stop: asyncio.Event) -> None:
    """One record to each partition every 50 ms until ``stop``."""
    async with AsyncProducer(boot) as p:
        i = 0
        while not stop.is_set():
            for part in range(n):
                await (await p.send_many(topic, [b"t%d" % i], partition=part))
            i += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)


async def _ended(s: StreamMember) -> bool:
    return s.ended.is_set()


def check_no_overlap(s: StreamMember, classic: Classic) -> None:
    """Per partition, the stream's records and the classic member's never interleave in
    time: one member's deliveries of a partition all end before the other's begin, for every
    hand-over."""
    by_tp: dict[TopicPartition, list[tuple[float, str]]] = {}
    for t, _g, tp, _o, _v in s.records():
        by_tp.setdefault(tp, []).append((t, "stream"))
    for t, _g, tp, _o in classic.records:
        by_tp.setdefault(tp, []).append((t, "classic"))
    for tp, seq in by_tp.items():
        owners = [who for _t, who in sorted(seq)]
        switches = sum(1 for a, b in itertools.pairwise(owners) if a != b)
        stream_ts = [t for t, who in seq if who == "stream"]
        classic_ts = [t for t, who in seq if who == "classic"]
        if stream_ts and classic_ts:
            print(
                f"{tp.topic}[{tp.partition}]: stream {len(stream_ts)} records, classic "
                f"{len(classic_ts)}; hand-over gap "
                f"{(min(classic_ts) - max(stream_ts)) * 1000:.0f} ms"
            )
        # stream (alone) -> maybe classic (split) -> classic (takeover): at most one switch
        assert switches <= 1, (tp, owners)


def test_credit_is_never_overrun(scluster: LocalCluster) -> None:
    """Grant N records: exactly N arrive, no more until a Credit; byte credit likewise (keys
    and values: 3-byte values here)."""
    boot = scluster.bootstrap
    topic = "gs-credit"

    async def settle(s: StreamMember, commit_id: int) -> int:
        # a Commit's answer: the stream has been through its loop since the last grant
        await s.commit(commit_id, {})
        return len(s.records())

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic(topic, 1)
        async with AsyncProducer(boot) as p:
            await (await p.send_many(topic, [b"v%02d" % i for i in range(60)], partition=0))
        s = StreamMember(boot, open_msg("g-gs-credit", [topic], credit_records=5))
        try:

            async def got(n: int) -> bool:
                return len(s.records()) >= n

            await async_wait_for(lambda: got(5), timeout=60, what="the first 5 records")
            for i in range(3):
                assert await settle(s, 10 + i) == 5
            s.send(credit=gs.ConsumeCredit(records=7))
            await async_wait_for(lambda: got(12), timeout=30, what="7 more records")
            assert await settle(s, 20) == 12
            # bytes: 10 bytes allow 3 values of 3 bytes (the 4th would need 12)
            s.send(credit=gs.ConsumeCredit(records=100, bytes=10))
            await async_wait_for(lambda: got(15), timeout=30, what="3 more records")
            assert await settle(s, 30) == 15
            s.send(credit=gs.ConsumeCredit(bytes=6))
            await async_wait_for(lambda: got(17), timeout=30, what="2 more records")
            assert await settle(s, 31) == 17
            offsets = [off for _t, _g, _tp, off, _v in s.records()]
            assert offsets == list(range(17))  # nothing skipped when the credit cut a batch
        finally:
            await s.close()

    asyncio.run(body())


def test_batches_format_delivers_record_batches(scluster: LocalCluster) -> None:
    boot = scluster.bootstrap
    topic = "gs-batches"

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic(topic, 1)
        async with AsyncProducer(boot) as p:
            for b in range(3):
                vals = [b"b%d-%d" % (b, i) for i in range(10)]
                await (await p.send_many(topic, vals, partition=0))
        s = StreamMember(
            boot,
            open_msg(
                "g-gs-batches",
                [topic],
                format=gs.DELIVERY_FORMAT_BATCHES,
                credit_records=1000,
                credit_bytes=1 << 20,
            ),
        )
        try:

            def values() -> list[bytes | None]:
                out: list[bytes | None] = []
                for _t, r in s.responses:
                    if r.WhichOneof("response") == "records":
                        assert not r.records.records
                        for batch in decode_batches(r.records.batches):
                            out.extend(batch.values())
                return out

            async def all_values() -> bool:
                return len(values()) >= 30

            await async_wait_for(all_values, timeout=60, what="30 records in batches")
            assert values() == [b"b%d-%d" % (b, i) for b in range(3) for i in range(10)]
            last = [r.records for _t, r in s.responses if r.WhichOneof("response") == "records"]
            assert last[-1].next_offset == 30
        finally:
            await s.close()

    asyncio.run(body())


@pytest.mark.parametrize(
    ("first", "then", "error"),
    [
        (gs.ConsumeRequest(credit=gs.ConsumeCredit(records=1)), None, errors.InvalidRequestError),
        (
            gs.ConsumeRequest(open=gs.ConsumeOpen(topics=["gs-bad"])),
            None,
            errors.InvalidRequestError,
        ),
        (
            gs.ConsumeRequest(open=gs.ConsumeOpen(group_id="g-bad")),
            None,
            errors.InvalidRequestError,
        ),
        (
            gs.ConsumeRequest(open=open_msg("g-bad", ["gs-bad"], credit_records=-1)),
            None,
            errors.InvalidRequestError,
        ),
        (
            gs.ConsumeRequest(open=open_msg("g-bad", ["gs-bad"], session_timeout_ms=5)),
            None,
            errors.InvalidSessionTimeoutError,
        ),
        (
            gs.ConsumeRequest(open=open_msg("g-bad", ["no-such-topic"])),
            None,
            errors.UnknownTopicOrPartitionError,
        ),
        (
            gs.ConsumeRequest(open=open_msg("g-bad", ["gs-bad"])),
            gs.ConsumeRequest(open=open_msg("g-bad", ["gs-bad"])),
            errors.InvalidRequestError,
        ),
        (
            gs.ConsumeRequest(open=open_msg("g-bad", ["gs-bad"])),
            gs.ConsumeRequest(credit=gs.ConsumeCredit(bytes=-5)),
            errors.InvalidRequestError,
        ),
    ],
    ids=[
        "credit-first",
        "empty-group",
        "no-topics",
        "negative-credit",
        "session-timeout",
        "unknown-topic",
        "second-open",
        "negative-credit-later",
    ],
)
def test_bad_input_gets_a_typed_error(
    scluster: LocalCluster,
    first: gs.ConsumeRequest,
    then: gs.ConsumeRequest | None,
    error: type[errors.HeadwaterError],
) -> None:
    """Each bad stream ends with its typed error (status + trailer) and leaves nothing: no
    member in the group, nothing committed."""
    boot = scluster.bootstrap

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            with contextlib.suppress(errors.TopicAlreadyExistsError):
                await admin.create_topic("gs-bad", 1)
        channel = grpc.aio.insecure_channel(boot)
        stub = group_stream_pb2_grpc.GroupStreamServiceStub(channel)

        async def requests() -> AsyncIterator[gs.ConsumeRequest]:
            yield first
            if then is not None:
                yield then
            await asyncio.Event().wait()  # held open: the server ends the stream first

        got: errors.HeadwaterError | None = None
        try:
            call = stub.Consume(requests())
            async with asyncio.timeout(60):
                async for _resp in call:
                    pass
        except grpc.RpcError as exc:
            got = errors.from_rpc_error(exc)
        finally:
            await channel.close()
        assert type(got) is error, got
        assert await group_members(boot, "g-bad") == 0

    asyncio.run(body())
