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

    def __init__(self, boot: str, open_: gs.ConsumeOpen) -> None:
        self.channel = grpc.aio.insecure_channel(boot)
        self.stub = group_stream_pb2_grpc.GroupStreamServiceStub(self.channel)
        self.outbox: asyncio.Queue[gs.ConsumeRequest | None] = asyncio.Queue()
        self.outbox.put_nowait(gs.ConsumeRequest(open=open_))
        self.responses: list[tuple[float, gs.ConsumeResponse]] = []
        self.error: errors.HeadwaterError | None = None
        self.ended = asyncio.Event()
        self.call = self.stub.Consume(self._requests())
        self.task = asyncio.get_running_loop().create_task(self._read())

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

        return await async_wait_for(answered, timeout=30, what=f"commit {commit_id} answered")

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
