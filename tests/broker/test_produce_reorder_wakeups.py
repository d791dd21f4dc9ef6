"""A produce waiting for its producer's earlier batches (``Partition.append``'s reorder wait)
is woken by what can end its wait, not by every change of the partition: an append of that
producer, a marker for it, or a change of the replica's role. Woken by every append and high
watermark move of every producer, W waiting calls cost W task wake-ups per append (a client
holding many far-ahead requests multiplied the cost of everyone else's appends)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from headwater.batch import encode_batch, validate_batches
from headwater.batch.layout import BatchHeader
from headwater.errors import InvalidProducerEpochError, NotLeaderOrFollowerError
from services.broker.partition import LeaderState, Partition
from tests.broker.reorder_helpers import reorder_leader
from tests.broker.reorder_helpers import reorder_waits as _waits
from tests.helpers.wait import async_wait_for

pytestmark = pytest.mark.fast

PID = 777


def _idem(n: int, seq: int, pid: int = PID, epoch: int = 0, txn: bool = False) -> bytes:
    return encode_batch(
        [b"v%d" % (seq + i) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
    )


async def _leader(tmp_path: Path, topic: str) -> Partition:
    p = await reorder_leader(tmp_path, topic)
    p.reorder_wait_s = 60.0  # only a wake-up ends a wait in these tests
    return p


async def _append(p: Partition, buf: bytes) -> tuple[int, int]:
    r = await p.append(
        buf, validate_batches(buf, max_batch_bytes=1 << 20), acks_all=True, timeout_ms=120_000
    )
    return r.base_offset, r.last_offset


def _count_checks_of(p: Partition, pid: int) -> list[int]:
    """Calls of the partition's ahead-of-sequence check for ``pid``'s batches."""
    checks: list[int] = []
    real = p.log.ahead_of_sequence

    def spy(batches: Sequence[tuple[int, BatchHeader]]) -> bool:
        if batches and batches[0][1].producer_id == pid:
            checks.append(1)
        return bool(real(batches))

    p.log.ahead_of_sequence = spy
    return checks


async def _waiting(p: Partition, buf: bytes) -> asyncio.Task[tuple[int, int]]:
    before = _waits(p.topic)
    task = asyncio.create_task(_append(p, buf))

    async def started() -> bool | None:
        return True if _waits(p.topic) == before + 1 else None

    await async_wait_for(started, timeout=30, what="the overtaking batch to wait")
    assert not task.done()
    return task


def test_other_producers_appends_do_not_wake_a_waiting_batch(tmp_path: Path) -> None:
    async def main() -> None:
        p = await _leader(tmp_path, "wake-others")
        assert await _append(p, _idem(2, 0)) == (0, 1)
        checks = _count_checks_of(p, PID)
        later = await _waiting(p, _idem(1, 5))  # 2..4 not there yet
        looked = len(checks)
        for seq in range(40):  # another producer, and plain batches, append meanwhile
            await _append(p, _idem(1, seq, pid=PID + 1))
            await _append(p, encode_batch([b"plain"]))
            for _ in range(3):
                await asyncio.sleep(0)  # a turn for every task woken (no time passes)
        assert len(checks) == looked, "woken by other producers' appends"
        assert not later.done()
        assert await _append(p, _idem(3, 2)) == (82, 84)  # its own predecessor wakes it
        assert await asyncio.wait_for(later, 30) == (85, 85)

    asyncio.run(main())


def test_a_waiting_batch_ends_at_once_when_the_leadership_moves(tmp_path: Path) -> None:
    async def main() -> None:
        p = await _leader(tmp_path, "wake-role")
        assert await _append(p, _idem(1, 0)) == (0, 0)
        later = await _waiting(p, _idem(1, 3))
        await p.become_follower(LeaderState(2, 2, 1, (1, 2), (1, 2)))
        with pytest.raises(NotLeaderOrFollowerError):
            await asyncio.wait_for(later, 30)
        assert p.log_end_offset == 1

    asyncio.run(main())


def test_a_waiting_batch_ends_at_once_when_a_marker_fences_its_epoch(tmp_path: Path) -> None:
    async def main() -> None:
        p = await _leader(tmp_path, "wake-marker")
        assert await _append(p, _idem(1, 0, txn=True)) == (0, 0)
        later = await _waiting(p, _idem(1, 4, txn=True))
        # the coordinator fences the producer: an abort marker of a newer epoch
        await p.write_marker(PID, 1, False, 0, 30_000)
        with pytest.raises(InvalidProducerEpochError):
            await asyncio.wait_for(later, 30)
        assert p.log_end_offset == 2

    asyncio.run(main())
