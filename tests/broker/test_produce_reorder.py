"""An idempotent producer's requests that reach the leader out of order (concurrent gRPC calls)
are appended in sequence order instead of being refused: a batch ahead of its producer's next
sequence waits, bounded, for the earlier ones (docs/transactions.md, "Requests that overtake
each other"; issue 17 item 5). A real gap is still refused after the wait, and a duplicate or a
batch of another producer never waits."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from headwater.batch import encode_batch, validate_batches
from headwater.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
)
from services.broker.partition import Partition
from tests.broker.reorder_helpers import reorder_leader as _leader
from tests.broker.reorder_helpers import reorder_waits as _waits
from tests.helpers.wait import async_wait_for

pytestmark = pytest.mark.fast

PID = 4242


def _idem(n: int, seq: int, pid: int = PID, epoch: int = 0) -> bytes:
    return encode_batch(
        [b"v%d" % (seq + i) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


async def _append(p: Partition, buf: bytes, timeout_ms: int = 30_000) -> tuple[int, int]:
    r = await p.append(
        buf, validate_batches(buf, max_batch_bytes=1 << 20), acks_all=True, timeout_ms=timeout_ms
    )
    return r.base_offset, r.last_offset


def test_a_request_that_overtakes_its_predecessor_waits_and_lands_after_it(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        p = await _leader(tmp_path, "reorder-ok")
        p.reorder_wait_s = 60.0  # the test decides when the predecessor arrives
        assert await _append(p, _idem(3, 0)) == (0, 2)
        before = _waits("reorder-ok")
        # sequences 5.. and 3.. arrive before 3.. (as two concurrent calls may)
        later = asyncio.create_task(_append(p, _idem(2, 5)))
        await async_wait_for(
            lambda: _ready(_waits("reorder-ok") == before + 1),
            timeout=30,
            what="the overtaking batch to wait",
        )
        assert not later.done()
        assert p.log_end_offset == 3  # nothing of it appended yet
        assert await _append(p, _idem(2, 3)) == (3, 4)
        assert await asyncio.wait_for(later, 30) == (5, 6)
        assert p.log_end_offset == 7

    asyncio.run(main())


def test_a_first_batch_overtaken_at_the_start_of_a_producer_waits_too(tmp_path: Path) -> None:
    async def main() -> None:
        p = await _leader(tmp_path, "reorder-first")
        p.reorder_wait_s = 60.0
        later = asyncio.create_task(_append(p, _idem(2, 2)))  # no state for the pid yet
        await async_wait_for(
            lambda: _ready(_waits("reorder-first") == 1),
            timeout=30,
            what="the overtaking batch to wait",
        )
        assert await _append(p, _idem(2, 0)) == (0, 1)
        assert await asyncio.wait_for(later, 30) == (2, 3)

    asyncio.run(main())


def test_a_real_gap_is_refused_after_the_wait_and_appends_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        p = await _leader(tmp_path, "reorder-gap")
        p.reorder_wait_s = 0.05
        assert await _append(p, _idem(2, 0)) == (0, 1)
        with pytest.raises(OutOfOrderSequenceNumberError):
            await _append(p, _idem(2, 5))
        with pytest.raises(UnknownProducerIdError):
            await _append(p, _idem(1, 9, pid=PID + 1))
        assert p.log_end_offset == 2
        assert _waits("reorder-gap") == 2
        # the producer goes on from where it really is
        assert await _append(p, _idem(1, 2)) == (2, 2)

    asyncio.run(main())


def test_duplicates_and_other_producers_do_not_wait(tmp_path: Path) -> None:
    async def main() -> None:
        p = await _leader(tmp_path, "reorder-none")
        p.reorder_wait_s = 60.0
        b0, b1 = _idem(2, 0), _idem(2, 2)
        assert await _append(p, b0) == (0, 1)
        assert await _append(p, b1) == (2, 3)
        assert await _append(p, b0) == (0, 1)  # a retry of an appended batch: its offsets
        assert await _append(p, _idem(1, 0, pid=PID + 1)) == (4, 4)
        plain = encode_batch([b"x", b"y"])
        assert await _append(p, plain) == (5, 6)
        assert await _append(p, _idem(1, 0, epoch=1)) == (7, 7)  # a new epoch starts at 0
        assert _waits("reorder-none") == 0

    asyncio.run(main())


async def _ready(value: bool) -> bool | None:
    return True if value else None


def test_waiting_calls_are_bounded_per_producer_and_per_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client cannot park an unbounded number of far-ahead calls (and their buffers): past
    the per-producer and per-partition limits a call is not held, and the sequence check
    refuses it at once, appending nothing; the calls already waiting still land in order."""
    from services.broker import partition as partition_mod

    async def main() -> None:
        p = await _leader(tmp_path, "reorder-bound")
        p.reorder_wait_s = 60.0  # a held call would make this test wait a minute
        assert await _append(p, _idem(1, 0)) == (0, 0)
        # sequences 2, 3, 4, 5 (1 is missing): four calls of one producer wait
        held = [asyncio.create_task(_append(p, _idem(1, s))) for s in (2, 3, 4, 5)]
        await async_wait_for(
            lambda: _ready(_waits("reorder-bound") == 4), timeout=30, what="four waiting calls"
        )
        with pytest.raises(OutOfOrderSequenceNumberError):  # the fifth is not held
            await asyncio.wait_for(_append(p, _idem(1, 6)), 30)
        assert _waits("reorder-bound") == 4
        # the partition's limit counts every producer's waiting calls
        monkeypatch.setattr(partition_mod, "REORDER_MAX_WAITING", 4)
        with pytest.raises(UnknownProducerIdError):
            await asyncio.wait_for(_append(p, _idem(1, 3, pid=PID + 1)), 30)
        assert p.log_end_offset == 1
        assert not any(t.done() for t in held)
        assert await _append(p, _idem(1, 1)) == (1, 1)
        assert [await asyncio.wait_for(t, 30) for t in held] == [(s, s) for s in (2, 3, 4, 5)]
        assert p.log_end_offset == 6

    asyncio.run(main())


def test_a_request_right_behind_one_queued_for_the_append_does_not_wait_for_its_append(
    tmp_path: Path,
) -> None:
    """While an append holds the partition (the lock held here stands for it), a request
    queued for it and the one right after it both take their places in the queue at once
    (no reorder wait: it would leave the log idle between the two appends for a loop round
    trip) and land in order."""

    async def main() -> None:
        p = await _leader(tmp_path, "reorder-queued")
        p.reorder_wait_s = 60.0
        assert await _append(p, _idem(3, 0)) == (0, 2)
        async with p._append_lock:  # another produce's append in progress
            first = asyncio.create_task(_append(p, _idem(2, 3), timeout_ms=120_000))
            second = asyncio.create_task(_append(p, _idem(2, 5), timeout_ms=120_000))
            await async_wait_for(
                lambda: _ready(p._queued_sequences.get(PID) == (0, 7)),
                timeout=30,
                what="both requests queued for the append",
            )
            assert _waits("reorder-queued") == 0
            assert p.log_end_offset == 3
        assert await asyncio.wait_for(first, 30) == (3, 4)
        assert await asyncio.wait_for(second, 30) == (5, 6)
        assert p._queued_sequences == {}  # gone with the last of them

    asyncio.run(main())


def test_a_waiting_request_queues_as_soon_as_its_predecessor_does(tmp_path: Path) -> None:
    """The overtaking request's wait ends when the missing one takes its place in the append
    queue, before either is appended; if that one is then refused, so is the follower (the
    sequence check at its append decides), and nothing lands out of order. (The appends'
    timeouts, 120 s, end their reorder waits long after the test's own waits give up.)"""

    async def main() -> None:
        p = await _leader(tmp_path, "reorder-handoff")
        p.reorder_wait_s = 60.0
        assert await _append(p, _idem(3, 0)) == (0, 2)
        async with p._append_lock:
            later = asyncio.create_task(_append(p, _idem(2, 5), timeout_ms=120_000))
            await async_wait_for(
                lambda: _ready(_waits("reorder-handoff") == 1),
                timeout=30,
                what="the overtaking request to wait",
            )
            earlier = asyncio.create_task(_append(p, _idem(2, 3), timeout_ms=120_000))
            await async_wait_for(
                lambda: _ready(p._queued_sequences.get(PID) == (0, 7)),
                timeout=30,
                what="the overtaking request to queue behind the earlier one",
            )
            assert p.log_end_offset == 3
        assert await asyncio.wait_for(earlier, 30) == (3, 4)
        assert await asyncio.wait_for(later, 30) == (5, 6)

        # a queued predecessor refused at its append (a stale epoch): its follower is refused
        # at its own append too, and the log is unchanged
        assert await _append(p, _idem(1, 0, epoch=1)) == (7, 7)
        async with p._append_lock:
            stale = asyncio.create_task(_append(p, _idem(1, 7)))
            follower = asyncio.create_task(_append(p, _idem(1, 8)))
            await async_wait_for(
                lambda: _ready(p._queued_sequences.get(PID) == (0, 9)),
                timeout=30,
                what="both stale-epoch requests queued",
            )
        for task in (stale, follower):
            with pytest.raises(InvalidProducerEpochError):
                await asyncio.wait_for(task, 30)
        assert p.log_end_offset == 8 and p._queued_sequences == {}

    asyncio.run(main())
