"""Incremental replica fetch sessions (Kafka's KIP-227 over the ReplicaFetch stream; issue 17
item 4: a broker idling with thousands of partitions). In process: the leader's
``FetchSession`` checks and answers only the partitions a request names or that changed, the
follower's ``LeaderFetcher`` names only what changed and forgets what is no longer ready, and
the ISR keeps an idle session's follower (``SessionClock``) without a fetch naming it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from headwater.batch import encode_batch, validate_batches
from headwater.v1 import broker_pb2, metadata_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.handlers.replica_fetch import FetchSession
from services.broker.metadata_cache import MetadataCache
from services.broker.partition import Partition
from services.broker.replica_manager import ReplicaManager
from services.broker.replication.fetcher import FetchState, LeaderFetcher
from services.broker.replication.isr import now_ms
from services.broker.storage.log_manager import LogManager
from tests.broker.lai_helpers import BROKER_EPOCH, ME, request
from tests.helpers.wait import async_wait_for

pytestmark = pytest.mark.fast

FOLLOWER = 2
N = 30


def state(partition: int, leader: int) -> broker_pb2.PartitionAssignment:
    return broker_pb2.PartitionAssignment(
        topic="t",
        state=metadata_pb2.PartitionState(
            partition=partition, leader=leader, replicas=[ME, FOLLOWER], isr=[ME, FOLLOWER]
        ),
    )


def fetch(
    offsets: dict[int, int], forgotten: tuple[int, ...] = (), max_wait_ms: int = 20
) -> broker_pb2.ReplicaFetchRequest:
    return broker_pb2.ReplicaFetchRequest(
        replica_id=FOLLOWER,
        broker_epoch=1,
        max_wait_ms=max_wait_ms,
        incremental=True,
        partitions=[
            broker_pb2.ReplicaFetchPartition(topic="t", partition=p, fetch_offset=o)
            for p, o in offsets.items()
        ],
        forgotten=[broker_pb2.ReplicaFetchForgotten(topic="t", partition=p) for p in forgotten],
    )


def manager(tmp_path: Path) -> ReplicaManager:
    rm = ReplicaManager(ME, LogManager([tmp_path]), MetadataCache())
    rm.broker_epoch = BROKER_EPOCH
    rm.controller_epoch = 1
    return rm


async def append(p: Partition, *values: bytes) -> None:
    buf = encode_batch(list(values))
    await p.append(
        buf, validate_batches(buf, max_batch_bytes=1 << 20), acks_all=False, timeout_ms=1000
    )


def test_the_leader_answers_only_named_or_changed_partitions(tmp_path: Path) -> None:
    rm = manager(tmp_path)

    async def scenario() -> None:
        await rm.leader_and_isr(request(*(state(p, ME) for p in range(N))))
        parts = [rm.partitions[("t", p)] for p in range(N)]
        session = FetchSession(rm)
        checked: list[int] = []
        real_record = Partition.record_follower_fetch

        def counting(self: Partition, *args: object, **kwargs: object) -> bool:
            checked.append(self.partition)
            return real_record(self, *args, **kwargs)  # type: ignore[arg-type]

        Partition.record_follower_fetch = counting  # type: ignore[method-assign]
        try:
            # the first request names every partition: each answered once (its HW)
            first = await session.answer(fetch(dict.fromkeys(range(N), 0)))
            assert first.incremental and sorted(d.partition for d in first.partitions) == list(
                range(N)
            )
            assert all(len(p._listeners) == 1 for p in parts)
            # an idle round names nothing, checks nothing and answers nothing
            checked.clear()
            idle = await session.answer(fetch({}))
            assert idle.incremental and not idle.partitions and checked == []

            # an append to one partition wakes a parked session, which answers it alone
            parked = asyncio.create_task(session.answer(fetch({}, max_wait_ms=30_000)))

            async def waiting() -> bool:
                return session._waiter is not None

            await async_wait_for(waiting, timeout=10, what="the session parked")
            await append(parts[7], b"a", b"b")
            woke = await asyncio.wait_for(parked, 10)
            assert [(d.partition, bool(d.records)) for d in woke.partitions] == [(7, True)]
            assert checked == [7]
            # the follower names 7 at its new offset: the HW moves, which is all it is told
            checked.clear()
            moved = await session.answer(fetch({7: 2}))
            assert [(d.partition, d.records, d.high_watermark) for d in moved.partitions] == [
                (7, b"", 2)
            ]
            assert checked == [7]

            # a forgotten partition is no longer listened to nor answered
            await session.answer(fetch({}, forgotten=(3,)))
            assert not parts[3]._listeners and ("t", 3) not in session.entries
            await append(parts[3], b"c")
            assert not (await session.answer(fetch({}))).partitions

            # the follower loses its place: answered with the error at once
            err = await session.answer(fetch({5: 99}, max_wait_ms=30_000))
            assert [(d.partition, d.error_code) for d in err.partitions] == [
                (5, ErrorCode.OFFSET_OUT_OF_RANGE)
            ]
        finally:
            Partition.record_follower_fetch = real_record  # type: ignore[method-assign]

        # the stream ended: no listener left, the followers are no longer in a session
        session.close()
        assert all(not p._listeners for p in parts)
        assert all(f.clock is None for p in parts for f in p.followers.values())

    asyncio.run(scenario())


def test_an_idle_session_keeps_its_follower_in_sync(tmp_path: Path) -> None:
    rm = manager(tmp_path)
    lag_ms = 1_000.0

    async def scenario() -> None:
        await rm.leader_and_isr(request(state(0, ME)))
        p = rm.partitions[("t", 0)]
        session = FetchSession(rm)
        await session.answer(fetch({0: 0}))
        f = p.followers[FOLLOWER]
        assert f.clock is session.clock
        # later, with only requests that do not name the partition: still caught up
        later = f.last_caught_up_ms + 10 * lag_ms
        session.clock.last_ms = later
        assert p.out_of_sync(later + 1, lag_ms) == []
        # an append moves the LEO past the follower, which does not come for it: it lags
        await append(p, b"x")
        assert p.out_of_sync(later + 1, lag_ms) == []  # caught up until the append
        session.clock.last_ms = later + 5 * lag_ms
        assert p.out_of_sync(later + 5 * lag_ms, lag_ms) == [FOLLOWER]
        # a sessionless fetch (clock None) is judged by its own fetches only
        assert not p.record_follower_fetch(FOLLOWER, 1, later + 6 * lag_ms)
        assert f.clock is None and p.out_of_sync(later + 6.5 * lag_ms, lag_ms) == []
        assert p.out_of_sync(later + 8 * lag_ms, lag_ms) == [FOLLOWER]

    asyncio.run(scenario())


def test_a_caught_up_session_follower_outside_the_isr_is_proposed_again(tmp_path: Path) -> None:
    rm = manager(tmp_path)

    async def scenario() -> None:
        out = broker_pb2.PartitionAssignment(
            topic="t",
            state=metadata_pb2.PartitionState(
                partition=0, leader=ME, replicas=[ME, FOLLOWER], isr=[ME]
            ),
        )
        await rm.leader_and_isr(request(out))
        p = rm.partitions[("t", 0)]
        session = FetchSession(rm)
        await session.answer(fetch({0: 0}))
        assert p.pending_isr == (ME, FOLLOWER)  # proposed by the fetch
        p.pending_isr = None  # the controller refused it
        rm.isr._queue.clear()
        assert rm.isr.shrink_pass(now_ms()) == 1
        assert p.pending_isr == (ME, FOLLOWER)
        session.close()
        p.pending_isr = None
        assert rm.isr.shrink_pass(now_ms()) == 0  # no session: only a fetch proposes

    asyncio.run(scenario())


def test_the_follower_names_only_what_changed_and_forgets_what_is_not_ready(
    tmp_path: Path,
) -> None:
    rm = manager(tmp_path)

    async def scenario() -> None:
        await rm.leader_and_isr(request(*(state(p, FOLLOWER) for p in range(N))))
        for p in range(N):
            rm.fetchers.remove(("t", p))  # driven by hand here
        fetcher = LeaderFetcher(rm.fetchers, FOLLOWER)
        states = {}
        for p in range(N):
            s = FetchState(rm.partitions[("t", p)], 0)
            fetcher.put(s)
            s.truncating = False  # as after OffsetForLeaderEpoch
            fetcher.truncating.clear()
            states[p] = s
        now = asyncio.get_running_loop().time()

        def named(req: broker_pb2.ReplicaFetchRequest | None) -> list[int]:
            assert req is not None and req.incremental
            return sorted(fp.partition for fp in req.partitions)

        fetcher._new_stream()
        assert named(fetcher._request(now)) == list(range(N))
        assert named(fetcher._request(now)) == []  # idle: an empty request, the session holds all
        # an answer applied to partition 4 (its LEO moved): named again, alone
        assert await states[4].partition.append_as_follower(encode_batch([b"r"]), 0, 0)
        fetcher.changed.add(("t", 4))
        fetcher.changed.add(("t", 5))  # answered without records: nothing to name
        req = fetcher._request(now)
        assert named(req) == [4] and req is not None and req.partitions[0].fetch_offset == 1
        # a paused partition is forgotten, then named again once the pause is over
        fetcher._pause(states[6], now + 0.3)
        req = fetcher._request(now)
        assert req is not None and [f.partition for f in req.forgotten] == [6]
        assert named(req) == []
        assert named(fetcher._request(now + 0.4)) == [6]
        # a partition the manager no longer follows from this leader is forgotten
        fetcher.drop(("t", 9))
        req = fetcher._request(now + 0.4)
        assert req is not None and [f.partition for f in req.forgotten] == [9]
        # a leader without sessions: every ready partition in every request
        fetcher.incremental = False
        req = fetcher._request(now + 0.4)
        assert req is not None and not req.incremental
        assert sorted(fp.partition for fp in req.partitions) == [p for p in range(N) if p != 9]

    asyncio.run(scenario())


class _Call:
    """One round of a ReplicaFetch stream, answered with ``resp``."""

    def __init__(self, resp: broker_pb2.ReplicaFetchResponse) -> None:
        self.resp = resp
        self.sent: list[broker_pb2.ReplicaFetchRequest] = []

    async def write(self, req: broker_pb2.ReplicaFetchRequest) -> None:
        self.sent.append(req)

    async def read(self) -> broker_pb2.ReplicaFetchResponse:
        return self.resp


@pytest.mark.parametrize("next_round_after_pause", [True, False])
def test_a_partition_answered_with_an_error_is_named_afresh(
    tmp_path: Path, next_round_after_pause: bool
) -> None:
    """The leader answers an error once (e.g. it has not created the partition yet): the
    follower names the partition again once its pause is over, even when its next request
    comes after the pause (it would otherwise believe the leader's session still fetches it,
    and the leader would never answer it: a 5,000-partition creation under load left ISRs
    short for good that way)."""
    rm = manager(tmp_path)

    async def scenario() -> None:
        await rm.leader_and_isr(request(*(state(p, FOLLOWER) for p in range(3))))
        for p in range(3):
            rm.fetchers.remove(("t", p))
        fetcher = LeaderFetcher(rm.fetchers, FOLLOWER)
        for p in range(3):
            s = FetchState(rm.partitions[("t", p)], 0, truncating=False)
            fetcher.states[s.partition.key] = s
        fetcher._new_stream()
        now = asyncio.get_running_loop().time()
        first = fetcher._request(now)
        assert first is not None and len(first.partitions) == 3
        err = broker_pb2.ReplicaFetchResponse(
            incremental=True,
            partitions=[
                broker_pb2.ReplicaFetchPartitionData(
                    topic="t", partition=1, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
            ],
        )
        await fetcher._round(_Call(err), first)  # type: ignore[arg-type]
        later = asyncio.get_running_loop().time()
        if next_round_after_pause:
            req = fetcher._request(later + 1.0)
            assert req is not None and [fp.partition for fp in req.partitions] == [1]
            assert not req.forgotten
        else:
            req = fetcher._request(later)  # still paused: the leader forgets it meanwhile
            assert req is not None and not req.partitions
            assert [f.partition for f in req.forgotten] == [1]
            again = fetcher._request(later + 1.0)
            assert again is not None and [fp.partition for fp in again.partitions] == [1]

    asyncio.run(scenario())
