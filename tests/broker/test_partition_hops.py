"""A follower's small appends and a leader's tail reads for its followers run on the event loop
(no worker-thread hop per partition per fetch round, issue 17 item 3), and so do a new
leadership's epoch and a follower's first batch of a new epoch (the leader-epoch entry is kept
in memory, its file written behind); a read far behind the log end, and anything on a log
another thread holds, still go to a worker thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from headwater.batch import encode_batch, validate_batches
from headwater.config import TopicConfig
from services.broker import partition as partition_mod
from services.broker.partition import LeaderState, Partition
from services.broker.storage.log import Log
from tests.helpers.wait import async_wait_for

pytestmark = pytest.mark.fast


def _batch(n: int, tag: int) -> bytes:
    return encode_batch(
        [f"{tag}:{i}".encode() for i in range(n)], timestamps=[1000 + i for i in range(n)]
    )


class Hops:
    """Counts the partition module's worker-thread hops (and still makes them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        real = asyncio.to_thread

        async def to_thread(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(getattr(fn, "__name__", repr(fn)))
            return await real(fn, *args, **kwargs)

        monkeypatch.setattr(partition_mod.asyncio, "to_thread", to_thread)


async def _leader_and_follower(tmp_path: Path) -> tuple[Partition, Partition]:
    config = TopicConfig()
    leader = Partition("t", 0, Log(tmp_path / "a" / "t-0", config), config, 1)
    follower = Partition("t", 0, Log(tmp_path / "b" / "t-0", config), config, 2)
    state = LeaderState(1, 3, 0, (1, 2), (1, 2))
    await leader.become_leader(state, 0.0)
    await follower.become_follower(state)
    return leader, follower


async def _replicate(leader: Partition, follower: Partition) -> None:
    part = await leader.read(follower.log_end_offset, 1 << 20, None)
    assert await follower.append_as_follower(part.data, 3, leader.high_watermark)


def test_follower_rounds_take_no_hop_even_for_a_new_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        hops = Hops(monkeypatch)
        leader, follower = await _leader_and_follower(tmp_path)
        assert hops.calls == []  # the new leadership's epoch: in memory, on the loop
        for tag in range(3):
            buf = _batch(2, tag)
            await leader.append(
                buf, validate_batches(buf, max_batch_bytes=1 << 20), acks_all=False, timeout_ms=0
            )
        await _replicate(leader, follower)  # the first batches of epoch 3 on the follower
        assert hops.calls == []  # its epoch entry is kept in memory: no file, no thread
        assert follower.log_end_offset == leader.log_end_offset == 6
        assert follower.log.epochs.entries == leader.log.epochs.entries
        hops.calls.clear()
        for tag in range(3, 8):  # the steady state: one batch per round
            buf = _batch(1, tag)
            await leader.append(
                buf, validate_batches(buf, max_batch_bytes=1 << 20), acks_all=False, timeout_ms=0
            )
            await _replicate(leader, follower)
        await _replicate(leader, follower)  # a round at the log end: nothing to read
        assert hops.calls == []
        assert follower.log_end_offset == leader.log_end_offset == 11
        a = await leader.read(0, 1 << 20, None)
        b = await follower.read(0, 1 << 20, None)
        assert a.data == b.data
        # a follower far behind reads in a worker thread
        for tag in range(8, 8 + 300):
            buf = _batch(1, tag)
            await leader.append(
                buf, validate_batches(buf, max_batch_bytes=1 << 20), acks_all=False, timeout_ms=0
            )
        await leader.read(0, 1 << 20, None)
        assert hops.calls == ["read"]
        leader.log.close()
        follower.log.close()

    asyncio.run(main())


def test_a_replica_long_poll_wakes_at_an_append_on_any_partition(tmp_path: Path) -> None:
    """The replica fetch long poll waits on one future for all its partitions: an append to
    any of them wakes it, the deadline ends it, and it leaves no watcher behind."""
    from headwater.v1 import broker_pb2
    from services.broker.handlers.replica_fetch import _long_poll

    async def main() -> None:
        config = TopicConfig()
        state = LeaderState(1, 0, 0, (1, 2), (1, 2))
        parts = [Partition("t", i, Log(tmp_path / f"t-{i}", config), config, 1) for i in range(20)]
        for p in parts:
            await p.become_leader(state, 0.0)
        req = broker_pb2.ReplicaFetchRequest(
            replica_id=2,
            partitions=[
                broker_pb2.ReplicaFetchPartition(topic="t", partition=i, fetch_offset=0)
                for i in range(20)
            ],
        )
        led = dict(enumerate(parts))
        loop = asyncio.get_running_loop()
        poll = asyncio.ensure_future(_long_poll(req, led, loop.time() + 60, False))

        async def parked() -> bool:  # every log end is 0: the poll waits
            return all(len(p._append_watchers) == 1 for p in parts)

        await async_wait_for(parked, timeout=10, what="the poll watching every partition")
        assert not poll.done()
        buf = _batch(1, 0)
        await parts[17].append(
            buf, validate_batches(buf, max_batch_bytes=1 << 20), acks_all=False, timeout_ms=0
        )
        await asyncio.wait_for(poll, 10)
        assert all(not p._append_watchers for p in parts)
        # nothing new past the fetch offsets: the deadline ends the wait
        req.partitions[17].fetch_offset = 1
        await _long_poll(req, led, loop.time() + 0.05, False)
        assert all(not p._append_watchers for p in parts)
        for p in parts:
            p.log.close()

    asyncio.run(main())


def test_a_follower_append_now_declines_what_would_wait(tmp_path: Path) -> None:
    """Partition.append_as_follower_now (a follower round's appends, no task each) appends a
    small batch at once, the first of a new epoch too; it does nothing and returns None when
    the partition is held by another coroutine, and False when this replica no longer follows
    in that epoch."""

    async def main() -> None:
        leader, follower = await _leader_and_follower(tmp_path)
        buf = _batch(2, 0)
        hdrs = validate_batches(buf, max_batch_bytes=1 << 20)
        await leader.append(buf, hdrs, acks_all=False, timeout_ms=0)
        first = (await leader.read(0, 1 << 20, None)).data
        assert follower.append_as_follower_now(first, 3, 2) is True  # epoch 3 is new here
        assert follower.log_end_offset == 2 and follower.log.epochs.entries[-1].epoch == 3
        buf = _batch(1, 1)
        await leader.append(
            buf, validate_batches(buf, max_batch_bytes=1 << 20), acks_all=False, timeout_ms=0
        )
        tail = (await leader.read(2, 1 << 20, None)).data
        async with follower._append_lock:  # a role change or a truncation in progress
            assert follower.append_as_follower_now(tail, 3, 3) is None
        assert follower.log_end_offset == 2
        assert follower.append_as_follower_now(tail, 2, 3) is False  # not epoch 2's follower
        assert follower.append_as_follower_now(tail, 3, 3) is True
        assert follower.log_end_offset == 3 and follower.high_watermark == 3
        leader.log.close()
        follower.log.close()

    asyncio.run(main())


def test_a_tail_read_of_few_large_records_goes_to_a_worker_thread(tmp_path: Path) -> None:
    """Few records behind the log end but megabytes of them: not read on the event loop."""

    async def main() -> None:
        leader, follower = await _leader_and_follower(tmp_path)
        big = [encode_batch([bytes([tag]) * (512 * 1024)], timestamps=[1000]) for tag in range(4)]
        for buf in big:
            await leader.append(
                buf, validate_batches(buf, max_batch_bytes=1 << 21), acks_all=False, timeout_ms=0
            )
        assert leader.log_end_offset == 4  # 4 records behind: few enough by count alone
        assert leader.read_now(0, 8 << 20, None) is None
        assert leader.read_now(3, 8 << 20, None) is None  # one 512 KiB record
        part = await leader.read(0, 8 << 20, None)
        assert len(part.data) == sum(len(b) for b in big)  # (offsets assigned by the leader)
        small = _batch(1, 9)
        await leader.append(
            small, validate_batches(small, max_batch_bytes=1 << 20), acks_all=False, timeout_ms=0
        )
        now = leader.read_now(4, 8 << 20, None)  # a small record past the large ones
        assert now is not None and len(now.data) == len(small)
        leader.log.close()
        follower.log.close()

    asyncio.run(main())


def test_a_new_leadership_goes_to_a_thread_only_when_the_log_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """become_leader starts the epoch on the loop; when another thread holds the log (a flush
    pass, the cleaner) it waits for it in a worker thread instead of blocking the loop."""

    async def main() -> None:
        config = TopicConfig()
        p = Partition("t", 0, Log(tmp_path / "t-0", config), config, 1)
        hops = Hops(monkeypatch)
        assert await p.become_leader(LeaderState(1, 3, 0, (1, 2), (1, 2)), 0.0)
        assert hops.calls == [] and p.log.epochs.entries[-1].epoch == 3
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with p.log._lock:
                holding.set()
                release.wait(20)

        holder = threading.Thread(target=hold)
        holder.start()
        assert holding.wait(20)
        lead = asyncio.create_task(p.become_leader(LeaderState(1, 4, 0, (1, 2), (1, 2)), 0.0))

        async def hopped() -> list[str]:
            return hops.calls

        await async_wait_for(hopped, timeout=20, what="the hop")
        assert hops.calls == ["assign_epoch"] and not lead.done()
        release.set()
        assert await lead
        holder.join(20)
        assert p.log.epochs.entries[-1].epoch == 4
        p.log.close()

    asyncio.run(main())
