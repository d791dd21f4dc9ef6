"""Accumulator: sealing by size and linger (fake clock), back-pressure, waiter resolution."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from headwater.batch import decode_batches
from headwater.client.accumulator import BATCH_OVERHEAD, RECORD_OVERHEAD, Accumulator, Group
from headwater.client.errors import BufferExhaustedError, DeliveryTimeoutError
from headwater.client.types import GroupMetadata, PartitionRange, RecordMetadata, TopicPartition
from headwater.errors import MessageTooLargeError, NotLeaderOrFollowerError
from tests.client.sender_helpers import accumulator

pytestmark = pytest.mark.fast

T = TypeVar("T")
TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(fn())


def make(clock: FakeClock, **kw: Any) -> Accumulator:
    return accumulator(clock=clock, **kw)


def leader0(_tp: TopicPartition) -> int:
    return 0


def always(_leader: int) -> bool:
    return True


def record_size(value: bytes) -> int:
    return RECORD_OVERHEAD + len(value)


def test_linger_seals_after_deadline_only() -> None:
    async def body() -> None:
        clock = FakeClock()
        acc = make(clock)
        fut = asyncio.get_running_loop().create_future()
        assert acc.try_reserve(record_size(b"v"))
        acc.append(TP, b"v", None, None, 5, record_size(b"v"), fut)
        batches, next_at, unknown = acc.drain(leader0, always, set(), 1 << 20)
        assert batches == {} and not unknown
        assert next_at == pytest.approx(1000.010)
        clock.now += 0.011
        batches, _, _ = acc.drain(leader0, always, set(), 1 << 20)
        [b] = batches[0]
        assert b.sealed and b.count == 1
        [decoded] = decode_batches(b.encoded or b"")
        assert decoded.values() == [b"v"] and decoded.timestamps().tolist() == [5]
        acc.complete(b, 42)
        assert fut.result() == RecordMetadata("t", 0, 42, 5)
        assert acc.used == 0 and not acc.incomplete

    run(body)


def test_size_seals_and_drains_without_waiting_for_linger() -> None:
    async def body() -> None:
        clock = FakeClock()
        acc = make(clock, batch_size=1024)
        loop = asyncio.get_running_loop()
        value = b"x" * 100
        futs = []
        for i in range(20):
            f = loop.create_future()
            acc.try_reserve(record_size(value))
            acc.append(TP, value, b"k%d" % i, None, 1, record_size(value), f)
            futs.append(f)
        dq = acc.queues[TP]
        assert len(dq) >= 2 and dq[0].sealed
        per_batch = (1024 - BATCH_OVERHEAD) // record_size(value)
        assert dq[0].count == per_batch
        # the sealed batches are ready now; the open tail waits for linger
        batches, _, _ = acc.drain(leader0, always, set(), 1 << 20)
        sent = batches[0]
        assert all(b.sealed for b in sent)
        assert sum(b.count for b in sent) == per_batch * len(sent)
        offset = 0
        for b in sent:
            acc.complete(b, offset)
            offset += b.count
        done = [f.result().offset for f in futs if f.done()]
        assert done == list(range(len(done))) and len(done) == offset

    run(body)


def test_timestamps_keys_headers_columns() -> None:
    async def body() -> None:
        acc = make(FakeClock(), linger_ms=0)
        loop = asyncio.get_running_loop()
        acc.try_reserve(1000)
        acc.append(TP, b"a", None, None, 10, 10, loop.create_future())
        acc.append(TP, b"b", b"kb", [("h", b"1")], 12, 10, loop.create_future())
        acc.append(TP, None, None, None, 12, 10, loop.create_future())
        batches, _, _ = acc.drain(leader0, always, set(), 1 << 20)
        [decoded] = decode_batches(batches[0][0].encoded or b"")
        assert decoded.values() == [b"a", b"b", None]
        assert decoded.keys() == [None, b"kb", None]
        assert decoded.headers() == [(), (("h", b"1"),), ()]
        assert decoded.timestamps().tolist() == [10, 12, 12]

    run(body)


def test_group_spans_batches_and_partitions() -> None:
    async def body() -> None:
        acc = make(FakeClock(), linger_ms=0)
        loop = asyncio.get_running_loop()
        group = Group("t", loop.create_future())
        acc.try_reserve(300)
        acc.append_many(TP, [b"a", b"b"], None, None, 7, 100, group)
        acc.seal_open(TP)
        acc.append_many(TP, [b"c"], None, None, 7, 100, group)
        acc.append_many(TP1, [b"d"], [b"k"], None, 7, 100, group)
        group.close_adding()
        batches, _, _ = acc.drain(leader0, always, set(), 1 << 20)
        assert not group.future.done()
        for b in batches[0]:
            acc.complete(b, 100 if b.tp == TP and b.count == 2 else 200)
        meta = group.future.result()
        assert isinstance(meta, GroupMetadata)
        assert sorted(meta.ranges, key=lambda r: (r.partition, r.base_offset)) == [
            PartitionRange(0, 100, 2),
            PartitionRange(0, 200, 1),
            PartitionRange(1, 200, 1),
        ]
        assert meta.record_count == 4

    run(body)


def test_failure_fails_group_and_records() -> None:
    async def body() -> None:
        acc = make(FakeClock(), linger_ms=0)
        loop = asyncio.get_running_loop()
        group = Group("t", loop.create_future())
        rec = loop.create_future()
        acc.try_reserve(200)
        acc.append_many(TP, [b"a"], None, None, 1, 100, group)
        acc.append(TP, b"b", None, None, 1, 100, rec)
        group.close_adding()
        batches, _, _ = acc.drain(leader0, always, set(), 1 << 20)
        acc.fail(batches[0][0], MessageTooLargeError("too big"))
        with pytest.raises(MessageTooLargeError):
            group.future.result()
        with pytest.raises(MessageTooLargeError):
            rec.result()
        assert acc.used == 0

    run(body)


def test_backpressure_blocks_then_proceeds_when_memory_is_released() -> None:
    async def body() -> None:
        acc = make(FakeClock(), buffer_memory=1000, batch_size=1024, max_block_ms=5000)
        assert acc.try_reserve(900)
        waiter = asyncio.ensure_future(acc.reserve(200))
        await asyncio.sleep(0)
        assert not waiter.done() and acc.memory_blocked
        acc.release(900)
        await asyncio.wait_for(waiter, 1)
        assert acc.used == 200

    run(body)


def test_backpressure_times_out_with_typed_error() -> None:
    async def body() -> None:
        acc = make(FakeClock(), buffer_memory=1000, batch_size=1024, max_block_ms=20)
        assert acc.try_reserve(900)
        with pytest.raises(BufferExhaustedError):
            await acc.reserve(200)
        assert acc.used == 900 and not acc.memory_blocked
        with pytest.raises(MessageTooLargeError):
            await acc.reserve(5000)  # can never fit

    run(body)


def test_blocked_writers_make_batches_ready() -> None:
    async def body() -> None:
        clock = FakeClock()
        acc = make(clock, buffer_memory=1000, batch_size=1024, max_block_ms=5000)
        acc.try_reserve(100)
        acc.append(TP, b"v", None, None, 1, 100, asyncio.get_running_loop().create_future())
        assert acc.drain(leader0, always, set(), 1 << 20)[0] == {}
        waiter = asyncio.ensure_future(acc.reserve(950))
        await asyncio.sleep(0)
        batches, _, _ = acc.drain(leader0, always, set(), 1 << 20)
        assert len(batches[0]) == 1  # ready despite linger because a writer is blocked
        acc.complete(batches[0][0], 0)
        await asyncio.wait_for(waiter, 1)

    run(body)


def test_unknown_leader_muted_and_in_flight_limits() -> None:
    async def body() -> None:
        clock = FakeClock()
        acc = make(clock, linger_ms=0)
        acc.try_reserve(100)
        acc.append(TP, b"v", None, None, 1, 10, asyncio.get_running_loop().create_future())
        assert acc.drain(lambda tp: -1, always, set(), 1 << 20)[2] is True
        assert acc.drain(leader0, lambda _l: False, set(), 1 << 20)[0] == {}
        assert acc.drain(leader0, always, {TP}, 1 << 20)[0] == {}
        assert len(acc.drain(leader0, always, set(), 1 << 20)[0][0]) == 1

    run(body)


def test_retry_reenqueues_at_head_after_backoff() -> None:
    async def body() -> None:
        clock = FakeClock()
        acc = make(clock, linger_ms=0)
        loop = asyncio.get_running_loop()
        acc.try_reserve(100)
        first = loop.create_future()
        acc.append(TP, b"1", None, None, 1, 10, first)
        [b1] = acc.drain(leader0, always, set(), 1 << 20)[0][0]
        second = loop.create_future()
        acc.append(TP, b"2", None, None, 1, 10, second)
        acc.reenqueue(b1, clock.now + 0.1)
        batches, next_at, _ = acc.drain(leader0, always, set(), 1 << 20)
        assert batches == {} and next_at == pytest.approx(clock.now + 0.1)
        clock.now += 0.2
        [r1, r2] = acc.drain(leader0, always, set(), 1 << 20)[0][0]
        assert r1 is b1 and b1.attempts == 1
        acc.complete(r1, 0)
        acc.complete(r2, 1)
        assert (first.result().offset, second.result().offset) == (0, 1)

    run(body)


def test_delivery_timeout_fails_queued_batches() -> None:
    async def body() -> None:
        clock = FakeClock()
        acc = make(clock, delivery_timeout_ms=1000)
        fut = asyncio.get_running_loop().create_future()
        acc.try_reserve(10)
        acc.append(TP, b"v", None, None, 1, 10, fut)
        clock.now += 2
        acc.drain(lambda tp: -1, always, set(), 1 << 20)
        with pytest.raises(DeliveryTimeoutError):
            fut.result()
        assert acc.used == 0

    run(body)


def test_fail_all_resolves_everything() -> None:
    async def body() -> None:
        acc = make(FakeClock())
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(3)]
        acc.try_reserve(30)
        for i, f in enumerate(futs):
            acc.append(TopicPartition("t", i), b"v", None, None, 1, 10, f)
        acc.fail_all(NotLeaderOrFollowerError("gone"))
        assert all(isinstance(f.exception(), NotLeaderOrFollowerError) for f in futs)
        assert acc.used == 0 and not acc.queues

    run(body)


def test_append_reports_when_it_seals_a_batch() -> None:
    async def body() -> None:
        acc = make(FakeClock(), batch_size=BATCH_OVERHEAD + 3 * record_size(b"x" * 10))
        loop = asyncio.get_running_loop()
        sealed = []
        for _ in range(7):
            assert acc.try_reserve(record_size(b"x" * 10))
            sealed.append(
                acc.append(
                    TP, b"x" * 10, None, None, 1, record_size(b"x" * 10), loop.create_future()
                )
            )
        # three records fill a batch: the third append seals it (the next would not fit)
        assert sealed == [False, False, True, False, False, True, False]

    run(body)


@pytest.mark.parametrize(("size", "as_pieces"), [(100, False), (1024, True)])
def test_large_values_are_encoded_as_pieces_of_their_own(size: int, as_pieces: bool) -> None:
    """Values of ~1 KiB are not joined into the batch (the request join copies them once);
    small ones are; either way the pieces are the batch's bytes and encoded_size their
    length."""

    async def body() -> None:
        acc = make(FakeClock(), batch_size=64 * 1024, buffer_memory=1 << 20)
        values = [bytes([i]) * size for i in range(20)]
        futs = []
        for v in values:
            fut = asyncio.get_running_loop().create_future()
            assert acc.try_reserve(record_size(v))
            acc.append(TP, v, None, None, 5, record_size(v), fut)
            futs.append(fut)
        acc.flushing += 1
        batches, _, _ = acc.drain(leader0, always, set(), 1 << 20)
        [b] = batches[0]
        assert b.pieces is not None
        assert b.encoded_size == sum(map(len, b.pieces)) == len(b.encoded or b"")
        assert all(any(p is v for p in b.pieces) for v in values) is as_pieces
        [decoded] = decode_batches(b.encoded or b"")
        assert decoded.values() == values
        acc.complete(b, 10)
        assert [f.result().offset for f in futs] == list(range(10, 30))

    run(body)


def test_a_retry_goes_to_a_new_leader_without_waiting_out_the_backoff() -> None:
    """The backoff of a failed attempt holds the batch while the broker that failed still
    leads the partition; once the metadata names another leader it is sent there at once."""

    async def body() -> None:
        clock = FakeClock()
        acc = make(clock, linger_ms=0)
        acc.try_reserve(100)
        acc.append(TP, b"1", None, None, 1, 10, asyncio.get_running_loop().create_future())
        [b1] = acc.drain(leader0, always, set(), 1 << 20)[0][0]
        acc.reenqueue(b1, clock.now + 0.1, 0)  # broker 0 failed it
        assert acc.drain(leader0, always, set(), 1 << 20)[0] == {}
        batches = acc.drain(lambda _tp: 1, always, set(), 1 << 20)[0]
        assert batches == {1: [b1]} and b1.attempts == 1

    run(body)
