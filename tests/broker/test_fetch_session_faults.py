"""Incremental replica fetch sessions under faults (review of issue 17 item 4): a session
that stopped sending requests (its follower hung: SIGSTOP, a black-holed link) must not put
its follower back into the ISR, and a session's state stays bounded by the partitions it may
fetch here (a request naming partitions that are not led here, or of which the requester is
not a replica, is answered with the error and leaves nothing behind)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from headwater.v1 import broker_pb2, metadata_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.handlers.replica_fetch import FetchSession
from services.broker.metadata_cache import MetadataCache
from services.broker.replica_manager import ReplicaManager
from services.broker.replication.isr import now_ms
from services.broker.storage.log_manager import LogManager
from tests.broker.lai_helpers import BROKER_EPOCH, ME, request

pytestmark = pytest.mark.fast

FOLLOWER = 2
OTHER = 3


def led(partition: int, replicas: list[int], isr: list[int]) -> broker_pb2.PartitionAssignment:
    return broker_pb2.PartitionAssignment(
        topic="t",
        state=metadata_pb2.PartitionState(
            partition=partition, leader=ME, replicas=replicas, isr=isr
        ),
    )


def fetch(
    topic: str, offsets: dict[int, int], max_wait_ms: int = 20
) -> broker_pb2.ReplicaFetchRequest:
    return broker_pb2.ReplicaFetchRequest(
        replica_id=FOLLOWER,
        broker_epoch=1,
        max_wait_ms=max_wait_ms,
        incremental=True,
        partitions=[
            broker_pb2.ReplicaFetchPartition(topic=topic, partition=p, fetch_offset=o)
            for p, o in offsets.items()
        ],
    )


def manager(tmp_path: Path) -> ReplicaManager:
    rm = ReplicaManager(ME, LogManager([tmp_path]), MetadataCache())
    rm.broker_epoch = BROKER_EPOCH
    rm.controller_epoch = 1
    return rm


def test_a_session_that_stopped_sending_requests_does_not_rejoin_the_isr(
    tmp_path: Path,
) -> None:
    """The follower was caught up, then its broker hung with the stream still open (no
    request for longer than replica.lag.time.max.ms): the ISR pass removed it; the next pass
    must not propose it again on the session's stale word (Kafka adds a follower to the ISR
    only on a fetch that shows it caught up; here it would flap in and out every pass)."""
    rm = manager(tmp_path)

    async def scenario() -> None:
        await rm.leader_and_isr(request(led(0, [ME, FOLLOWER], [ME, FOLLOWER])))
        p = rm.partitions[("t", 0)]
        session = FetchSession(rm)
        await session.answer(fetch("t", {0: 0}))  # the hung follower's last request
        assert p.followers[FOLLOWER].clock is session.clock
        later = now_ms() + 10 * rm.isr.lag_ms  # no request since
        assert p.out_of_sync(later, rm.isr.lag_ms) == [FOLLOWER]
        assert rm.isr.shrink_pass(later) == 1
        assert p.pending_isr == (ME,)
        # the controller applied the shrink
        p.isr, p.pending_isr = (ME,), None
        rm.isr._queue.clear()
        assert rm.isr.shrink_pass(later) == 0
        assert p.pending_isr is None
        # a request of the session again (the broker resumed): caught up, proposed
        await session.answer(fetch("t", {}))
        assert rm.isr.shrink_pass(now_ms()) == 1
        assert p.pending_isr == (ME, FOLLOWER)

    asyncio.run(scenario())


def test_a_session_keeps_nothing_of_partitions_it_may_not_fetch(tmp_path: Path) -> None:
    """A request naming thousands of partitions this broker does not lead, or leads without
    the requester among the replicas, is answered with the errors; the session keeps no
    entry, listener or follower state of them (bounded memory per stream, whatever a peer
    names)."""
    rm = manager(tmp_path)

    async def scenario() -> None:
        await rm.leader_and_isr(request(led(0, [ME, OTHER], [ME, OTHER])))
        p = rm.partitions[("t", 0)]
        session = FetchSession(rm)
        bogus = await session.answer(fetch("nope", dict.fromkeys(range(5_000), 0)))
        assert len(bogus.partitions) == 5_000
        assert {d.error_code for d in bogus.partitions} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        not_mine = await session.answer(fetch("t", {0: 0}))
        assert [(d.partition, d.error_code) for d in not_mine.partitions] == [
            (0, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        ]
        assert session.entries == {}
        assert not p._listeners and FOLLOWER not in p.followers
        # later requests of the session answer nothing about them
        idle = await session.answer(fetch("t", {}))
        assert not idle.partitions

    asyncio.run(scenario())
