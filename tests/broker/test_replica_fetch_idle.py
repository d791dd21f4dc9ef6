"""An idle follower fetch session (leader side, in process): it parks on one future for all
its partitions (no task per partition), answers caught-up partitions without reading, and
wakes on an append to any of them (issue 17 item 4: idle CPU with thousands of partitions)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from headwater.batch import encode_batch, validate_batches
from headwater.v1 import broker_pb2, metadata_pb2
from services.broker.handlers.replica_fetch import answer
from services.broker.metadata_cache import MetadataCache
from services.broker.replica_manager import ReplicaManager
from services.broker.storage.log_manager import LogManager
from tests.broker.lai_helpers import BROKER_EPOCH, ME, request
from tests.helpers.wait import async_wait_for

pytestmark = pytest.mark.fast

FOLLOWER = 2
N = 40


def led(partition: int) -> broker_pb2.PartitionAssignment:
    return broker_pb2.PartitionAssignment(
        topic="t",
        state=metadata_pb2.PartitionState(
            partition=partition, leader=ME, replicas=[ME, FOLLOWER], isr=[ME, FOLLOWER]
        ),
    )


def fetch(max_wait_ms: int) -> broker_pb2.ReplicaFetchRequest:
    return broker_pb2.ReplicaFetchRequest(
        replica_id=FOLLOWER,
        broker_epoch=1,
        max_wait_ms=max_wait_ms,
        partitions=[
            broker_pb2.ReplicaFetchPartition(topic="t", partition=p, fetch_offset=0)
            for p in range(N)
        ],
    )


def test_an_idle_session_waits_on_one_future_and_wakes_on_any_append(tmp_path: Path) -> None:
    rm = ReplicaManager(ME, LogManager([tmp_path]), MetadataCache())
    rm.broker_epoch = BROKER_EPOCH
    rm.controller_epoch = 1

    async def scenario() -> None:
        resp = await rm.leader_and_isr(request(*(led(p) for p in range(N))))
        assert all(r.error_code == 0 for r in resp.partitions)
        parts = [rm.partitions[("t", p)] for p in range(N)]

        # nothing arrives: every partition answered empty at the deadline, nothing left behind
        idle = await answer(rm, fetch(20))
        assert [(d.partition, d.records, d.error_code) for d in idle.partitions] == [
            (p, b"", 0) for p in range(N)
        ]
        assert all(not p._append_watchers for p in parts)

        tasks_before = len(asyncio.all_tasks())
        session = asyncio.create_task(answer(rm, fetch(30_000)))

        async def parked() -> bool:
            return all(len(p._append_watchers) == 1 for p in parts)

        await async_wait_for(parked, timeout=10, what="the session parked on every partition")
        assert len({id(w) for p in parts for w in p._append_watchers}) == 1  # one future
        assert len(asyncio.all_tasks()) == tasks_before + 1  # the session alone
        buf = encode_batch([b"v1", b"v2"])
        await parts[7].append(
            buf, validate_batches(buf, max_batch_bytes=1 << 20), acks_all=False, timeout_ms=1000
        )
        woke = await asyncio.wait_for(session, 10)
        got = {d.partition: d for d in woke.partitions}
        assert len(got) == N and got[7].records and got[7].error_code == 0
        assert all(not got[p].records and got[p].error_code == 0 for p in range(N) if p != 7)
        assert all(not p._append_watchers for p in parts)

    asyncio.run(scenario())


def test_a_caught_up_follower_round_moves_the_hw_without_waiting(tmp_path: Path) -> None:
    rm = ReplicaManager(ME, LogManager([tmp_path]), MetadataCache())
    rm.broker_epoch = BROKER_EPOCH
    rm.controller_epoch = 1

    async def scenario() -> None:
        follows = broker_pb2.PartitionAssignment(
            topic="t",
            state=metadata_pb2.PartitionState(
                partition=0, leader=FOLLOWER, leader_epoch=3, replicas=[FOLLOWER, ME], isr=[ME]
            ),
        )
        await rm.leader_and_isr(request(follows))
        p = rm.partitions[("t", 0)]
        rm.fetchers.remove(("t", 0))  # driven by hand here
        buf = encode_batch([b"a", b"b", b"c"])
        assert await p.append_as_follower(buf, 3, 0)
        assert p.append_as_follower_now(b"", 3, 2) is True and p.high_watermark == 2
        assert p.append_as_follower_now(b"", 3, 99) is True and p.high_watermark == 3  # within LEO
        assert p.append_as_follower_now(b"", 4, 3) is False  # another leader epoch
        async with p._append_lock:  # an append or truncation in progress: the waiting path
            assert p.append_as_follower_now(b"", 3, 3) is None

    asyncio.run(scenario())
