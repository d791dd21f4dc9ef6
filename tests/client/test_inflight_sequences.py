"""Five batches in flight per partition with idempotence: the window, retries in sequence
order, out-of-order recovery, dropped sequences, duplicates answered with the original offset.

Pure logic: the Sequencer alone, then the real Accumulator and Sender against an in-process
fake broker that validates sequences with the broker's own ProducerStateManager (the
five-batch duplicate window included) and lets a test hold requests and answer them in any
order, as concurrent gRPC calls may arrive.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc
import pytest

from headwater import errors
from headwater.batch import (
    Compression,
    decode_batches,
    encode_batch,
    iter_headers,
    parse_header,
    verify_crc,
    with_base_sequence,
)
from headwater.client.accumulator import Accumulator
from headwater.client.idempotence import Producing, Sequencer
from headwater.client.sender import Sender
from headwater.client.types import TopicPartition
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.codes import error_code
from services.broker.storage.producer_state import ProducerStateManager
from tests.helpers.sequenced import FakeMetadata, Item
from tests.helpers.wait import async_wait_for

pytestmark = pytest.mark.fast

T = TypeVar("T")
TP = TopicPartition("t", 0)


def run(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(fn())


# ---------------------------------------------------------------- the window


def test_the_window_holds_max_in_flight_batches_until_the_oldest_is_acked() -> None:
    s = Sequencer(5)
    s.reset(1, 0)
    items = [Item(TP, 2) for _ in range(5)]
    for k, it in enumerate(items):
        assert s.room(TP) == 5 - k
        assert s.assign(it) == 2 * k
    assert s.room(TP) == 0
    # later batches acknowledged first do not free the window: the oldest is unresolved
    for it in items[1:]:
        s.acked(it)
    assert s.room(TP) == 0 and s.first(TP) is items[0]
    s.acked(items[0])
    assert s.room(TP) == 5 and s.first(TP) is None
    assert s.parts[TP].last_acked == 9


def test_max_in_flight_bounds_the_window_and_must_not_exceed_five() -> None:
    s = Sequencer(2)
    s.reset(1, 0)
    s.assign(Item(TP, 1))
    s.assign(Item(TP, 1))
    assert s.room(TP) == 0
    with pytest.raises(errors.InvalidConfigError):
        Sequencer(6)


def test_drop_moves_later_batches_down_and_marks_them_for_restamping() -> None:
    s = Sequencer()
    s.reset(1, 0)
    a, b, c, d = Item(TP, 3), Item(TP, 4), Item(TP, 5), Item(TP, 1)
    for it in (a, b, c, d):
        s.assign(it)
    s.acked(a)
    moved = s.drop(b)  # b failed for good, nothing of it appended
    assert moved == [c, d]
    assert (c.base_seq, d.base_seq) == (3, 8) and c.restamp and d.restamp
    assert s.next_seq(TP) == 9
    assert s.first(TP) is c and s.room(TP) == 3
    with pytest.raises(errors.InvalidRequestError):
        s.drop(a)  # acknowledged: reusing its sequences would be a silent reset


def test_drop_of_the_last_batch_reuses_its_sequences() -> None:
    s = Sequencer()
    s.reset(1, 0)
    a, b = Item(TP, 4), Item(TP, 4)
    s.assign(a)
    s.assign(b)
    s.acked(a)
    assert s.drop(b) == []
    nxt = Item(TP, 2)
    assert s.assign(nxt) == 4


def test_drop_refuses_when_a_later_batch_was_acknowledged() -> None:
    s = Sequencer()
    s.reset(1, 0)
    a, b = Item(TP, 1), Item(TP, 1)
    s.assign(a)
    s.assign(b)
    s.acked(b)  # impossible from a broker, but must not silently renumber an acked batch
    with pytest.raises(errors.InvalidRequestError):
        s.drop(a)


def test_quota_sends_a_retry_alone_and_only_when_it_is_the_oldest() -> None:
    s = Sequencer()
    s.reset(1, 0)
    p = Producing(s, transactional=False)
    a, b, fresh = Item(TP, 1), Item(TP, 1), Item(TP, 1)
    s.assign(a)
    s.assign(b)
    assert p.quota(TP, fresh) == 3  # room left in the window
    assert p.quota(TP, b) == 0  # a retry of b waits for a
    s.acked(a)
    assert p.quota(TP, b) == 1


def test_restamped_bytes_carry_the_new_sequence_with_a_valid_crc() -> None:
    raw = encode_batch([b"a", b"b"], producer_id=3, producer_epoch=1, base_sequence=10)
    out = with_base_sequence(raw, 4)
    h = parse_header(out)
    verify_crc(out, 0, h)
    assert (h.base_sequence, h.producer_id, h.producer_epoch) == (4, 3, 1)
    assert out[64:] == raw[64:]


# ---------------------------------------------------------------- sender and fake broker


class Held:
    """One produce call that reached the fake broker, waiting to be answered."""

    def __init__(self, request: broker_pb2.ProduceRequest) -> None:
        self.request = request
        self.release: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.answered = False

    @property
    def sequences(self) -> list[int]:
        return [
            h.base_sequence for p in self.request.partitions for _, h in iter_headers(p.records)
        ]


class FakeBroker:
    """One partition's log, validated with the broker's producer state (duplicates answered
    with the original offsets, out-of-order and unknown producers refused). ``hold`` keeps
    calls waiting until the test releases them; ``inject`` maps the arrival index of a call
    to an in-band error code (nothing appended) or to ``LOST`` (appended, then the call fails
    as a transport error)."""

    LOST = -1
    BUG = -2  # the call raises an unexpected exception (not a gRPC error)
    #: ``inject`` value + this: the entry is appended, then answered with the in-band code
    #: (an acks=all wait that ended in REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND or
    #: NOT_LEADER_OR_FOLLOWER after the append, as ``Partition.append`` answers)
    AFTER_APPEND = 1 << 20

    def __init__(self) -> None:
        self.state = ProducerStateManager()
        self.log: list[bytes] = []
        self.calls: list[Held] = []
        self.hold = True
        self.inject: dict[int, int] = {}

    def raw_produce(self, _address: str) -> Any:
        async def call(request: bytes, timeout: float) -> broker_pb2.ProduceResponse:
            held = Held(broker_pb2.ProduceRequest.FromString(request))
            index = len(self.calls)
            self.calls.append(held)
            if self.hold:
                await held.release
            code = self.inject.get(index, ErrorCode.NONE)
            if code == self.BUG:
                raise RuntimeError("unexpected")
            results = [self._append(p, code) for p in held.request.partitions]
            held.answered = True
            if code == self.LOST:
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.aio.Metadata(),
                    grpc.aio.Metadata(),
                    details="connection reset",
                )
            return broker_pb2.ProduceResponse(partitions=results)

        return call

    def _append(
        self, p: broker_pb2.PartitionRecords, code: int
    ) -> broker_pb2.PartitionProduceResult:
        res = broker_pb2.PartitionProduceResult(
            topic=p.topic, partition=p.partition, base_offset=-1, log_append_time=-1
        )
        if code >= self.AFTER_APPEND:
            appended = self._append(p, ErrorCode.NONE)
            appended.error_code = code - self.AFTER_APPEND  # type: ignore[assignment]
            appended.base_offset = -1
            return appended
        if code not in (ErrorCode.NONE, self.LOST):
            res.error_code = code  # type: ignore[assignment]
            return res
        batches = list(iter_headers(p.records))
        try:
            dups = self.state.check(batches)
        except errors.HeadwaterError as exc:
            res.error_code = error_code(exc)
            return res
        found = [d for d in dups if d is not None]
        if len(found) == len(batches):
            res.base_offset = min(d.first_offset for d in found)
            return res
        res.base_offset = len(self.log)
        decoded = decode_batches(p.records)
        for (_, h), d, rb in zip(batches, dups, decoded, strict=True):
            if d is None:
                self.state.apply_data(h, len(self.log))
                self.log.extend(v or b"" for v in rb.values())
        return res

    async def answer(self, *indexes: int) -> None:
        """Release the calls ``indexes`` together (the broker handles them in that order) and
        wait until the sender has handled their answers (in the step the call returns)."""
        for i in indexes:
            self.calls[i].release.set_result(None)
        await async_wait_for(
            lambda: _true(all(self.calls[i].answered for i in indexes)),
            timeout=5,
            what=f"calls {indexes} answered",
            interval=0.001,
        )

    async def calls_reach(self, n: int) -> None:
        await async_wait_for(
            lambda: _true(len(self.calls) >= n), timeout=5, what=f"{n} calls", interval=0.001
        )


async def _true(value: bool) -> bool:
    return value


class Rig:
    """An idempotent Sender over a real Accumulator and the fake broker."""

    def __init__(
        self,
        broker: FakeBroker,
        max_in_flight: int = 5,
        retries: int = 20,
        *,
        idempotent: bool = True,
    ) -> None:
        self.acc = Accumulator(
            batch_size=4096,
            linger_ms=0,
            buffer_memory=1 << 20,
            max_block_ms=50,
            delivery_timeout_ms=60_000,
            compression=Compression.NONE,
            clock=time.monotonic,
        )
        self.seq = Sequencer(max_in_flight)
        self.seq.reset(7, 0)
        self.sender = Sender(
            self.acc,
            FakeMetadata(),  # type: ignore[arg-type]
            broker,  # type: ignore[arg-type]
            acks=broker_pb2.ACKS_ALL if idempotent else broker_pb2.ACKS_LEADER,
            max_in_flight=max_in_flight,
            request_timeout_ms=1000,
            retries=retries,
            retry_backoff_ms=1,
            max_request_size=1 << 20,
            client_id="t",
            producing=Producing(self.seq, transactional=False) if idempotent else None,
        )
        self.task = asyncio.get_running_loop().create_task(self.sender.run())
        self.futures: list[asyncio.Future[Any]] = []
        self.values: list[bytes] = []

    def batch(self, k: int, per: int = 3, tp: TopicPartition = TP) -> None:
        """Queue one sealed batch of ``per`` records named ``k.i`` (to ``tp``)."""
        loop = asyncio.get_running_loop()
        for i in range(per):
            value = b"%d.%d" % (k, i)
            fut = loop.create_future()
            assert self.acc.try_reserve(20)
            self.acc.append(tp, value, None, None, 1, 20, fut)
            self.futures.append(fut)
            self.values.append(value)
        self.acc.seal_open(tp)

    async def close(self) -> None:
        if self.futures:
            await asyncio.wait(self.futures, timeout=5)
        self.sender.closing = True
        self.sender.wake()
        await asyncio.wait_for(self.task, 5)

    def drain_now(self) -> dict[int, Any]:
        """What a drain would send now (as the sender's own drain, on the same state)."""
        sender = self.sender
        out, _next, _unknown = self.acc.drain(
            lambda _tp: 0, sender._can_send, sender.muted, 1 << 20, sender.producing
        )
        return out

    def offsets(self) -> list[int]:
        return [f.result().offset for f in self.futures]


async def send_in_separate_calls(broker: FakeBroker, rig: Rig, n: int) -> None:
    """Queue ``n`` batches one at a time, each going out in its own held call."""
    for k in range(n):
        rig.batch(k)
        await broker.calls_reach(k + 1)


def test_five_batches_of_a_partition_are_in_flight_in_separate_requests() -> None:
    async def go() -> None:
        broker = FakeBroker()
        rig = Rig(broker)
        await send_in_separate_calls(broker, rig, 5)
        assert [c.sequences for c in broker.calls] == [[0], [3], [6], [9], [12]]
        rig.batch(5)  # the window is full: the sixth waits for the oldest to be acknowledged
        assert rig.drain_now() == {}
        await broker.answer(0)
        await broker.calls_reach(6)
        assert broker.calls[5].sequences == [15]
        broker.hold = False
        await broker.answer(1, 2, 3, 4, 5)
        await rig.close()
        assert broker.log == rig.values
        assert rig.offsets() == list(range(18))
        rig.seq.check()

    run(go)


def test_batches_drained_together_go_one_per_request_within_the_free_slots() -> None:
    async def go() -> None:
        broker = FakeBroker()
        rig = Rig(broker)
        for k in range(3):  # queued before the sender's first drain: drained together
            rig.batch(k)
        await broker.calls_reach(3)
        assert [c.sequences for c in broker.calls] == [[0], [3], [6]]
        broker.hold = False
        await broker.answer(0, 1, 2)
        await rig.close()
        assert broker.log == rig.values

    run(go)


def test_requests_beyond_the_brokers_free_slots_share_the_last_one() -> None:
    async def go() -> None:
        rig = Rig(FakeBroker())
        other = TopicPartition("t", 1)
        drained: list[Any] = [Item(TP, 1) for _ in range(4)] + [Item(other, 1)]
        rig.sender.in_flight[0] = 3  # 2 of the broker's 5 request slots free
        parts = rig.sender._requests_of(0, drained)
        assert parts == [[drained[0], drained[4]], drained[1:4]]
        await rig.close()

    run(go)


def test_a_partition_without_followers_sends_its_batches_drained_together_in_one_request() -> None:
    async def go() -> None:
        broker = FakeBroker()
        rig = Rig(broker)
        rig.sender.metadata.view.unreplicated.add(TP)
        for k in range(3):  # queued before the sender's first drain: drained together
            rig.batch(k)
        await broker.calls_reach(1)
        assert [c.sequences for c in broker.calls] == [[0, 3, 6]]
        broker.hold = False
        await broker.answer(0)
        await rig.close()
        assert broker.log == rig.values
        assert rig.offsets() == list(range(9))

    run(go)


def test_unreplicated_batches_ride_in_the_first_request_beside_a_replicated_split() -> None:
    async def go() -> None:
        rig = Rig(FakeBroker())
        other = TopicPartition("t", 1)
        rig.sender.metadata.view.unreplicated.add(other)
        drained: list[Any] = [Item(TP, 1), Item(other, 1), Item(TP, 1), Item(other, 1)]
        parts = rig.sender._requests_of(0, drained)
        assert parts == [[drained[0], drained[1], drained[3]], [drained[2]]]
        await rig.close()

    run(go)


def test_requests_answered_in_reverse_order_are_resent_in_sequence_order() -> None:
    async def go() -> None:
        broker = FakeBroker()
        rig = Rig(broker)
        await send_in_separate_calls(broker, rig, 4)
        # the broker sees the later calls first (concurrent gRPC calls may overtake)
        await broker.answer(3, 2, 1)  # OUT_OF_ORDER: an earlier batch is still pending
        assert broker.log == []
        broker.hold = False
        await broker.answer(0)
        await rig.close()
        assert broker.log == rig.values  # every record once, in send order
        assert rig.offsets() == list(range(12))
        # the retries went out one at a time, oldest first
        assert [c.sequences for c in broker.calls[4:]] == [[3], [6], [9]]
        rig.seq.check()

    run(go)


def test_retriable_error_with_five_in_flight_keeps_order_and_appends_once() -> None:
    async def go() -> None:
        broker = FakeBroker()
        broker.inject[1] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        rig = Rig(broker)
        await send_in_separate_calls(broker, rig, 5)
        broker.hold = False
        await broker.answer(0, 1, 2, 3, 4)
        await rig.close()
        assert broker.log == rig.values
        assert rig.offsets() == list(range(15))
        assert [c.sequences for c in broker.calls[5:]] == [[3], [6], [9], [12]]
        rig.seq.check()

    run(go)


def test_a_lost_answer_with_later_batches_acked_is_resent_as_a_duplicate() -> None:
    async def go() -> None:
        broker = FakeBroker()
        broker.inject[1] = FakeBroker.LOST  # appended, but the client sees a transport error
        rig = Rig(broker)
        await send_in_separate_calls(broker, rig, 5)
        broker.hold = False
        await broker.answer(0, 1, 2, 3, 4)
        await rig.close()
        assert broker.log == rig.values  # the resend was a duplicate: nothing appended twice
        assert rig.offsets() == list(range(15))  # batch 1 got its original offsets
        assert [c.sequences for c in broker.calls[5:]] == [[3]]
        rig.seq.check()

    run(go)


def test_a_batch_failing_for_good_releases_its_sequences_to_the_batches_in_flight() -> None:
    async def go() -> None:
        broker = FakeBroker()
        broker.inject[1] = ErrorCode.MESSAGE_TOO_LARGE
        rig = Rig(broker)
        await send_in_separate_calls(broker, rig, 4)
        broker.hold = False
        await broker.answer(0, 1, 2, 3)
        await rig.close()
        failed = rig.futures[3:6]
        assert all(isinstance(f.exception(), errors.MessageTooLargeError) for f in failed)
        kept = rig.values[:3] + rig.values[6:]
        assert broker.log == kept
        assert [f.result().offset for f in rig.futures[:3] + rig.futures[6:]] == list(range(9))
        # batches 2 and 3 were resent re-stamped with the dropped batch's sequences
        assert [c.sequences for c in broker.calls[4:]] == [[3], [6]]
        assert rig.seq.next_seq(TP) == 9
        rig.seq.check()

    run(go)


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ],
)
def test_a_batch_failing_for_good_after_an_append_never_lends_its_sequences(code: int) -> None:
    """The broker appended the entry, then its acks=all wait failed in-band; the batch is out
    of retries. Its sequences are in the broker's run: released to the next batch, that batch
    would be answered as their duplicate (acknowledged, its own records never written).
    Every acknowledged record must be in the log at its offset."""

    async def go() -> None:
        broker = FakeBroker()
        broker.hold = False
        broker.inject[1] = broker.inject[2] = FakeBroker.AFTER_APPEND + code  # and its retry
        rig = Rig(broker, retries=1)
        for k in range(3):
            rig.batch(k)
            await async_wait_for(
                lambda: _true(all(f.done() for f in rig.futures)),
                timeout=5,
                what=f"batch {k} resolved",
                interval=0.001,
            )
        await rig.close()
        assert rig.futures[3].exception() is not None  # batch 1 failed for good
        for f, value in zip(rig.futures, rig.values, strict=True):
            if f.exception() is None:
                assert broker.log[f.result().offset] == value
        # batch 1's outcome is unknown to the producer: it cannot go on numbering
        with pytest.raises(errors.OutOfOrderSequenceNumberError):
            rig.seq.check()

    run(go)


def test_out_of_order_when_the_predecessor_was_acked_before_sending_is_fatal() -> None:
    async def go() -> None:
        broker = FakeBroker()
        broker.hold = False
        rig = Rig(broker)
        rig.batch(0)
        await broker.calls_reach(1)
        await async_wait_for(
            lambda: _true(rig.futures[0].done()), timeout=5, what="ack", interval=0.001
        )
        broker.state.entries.clear()  # the broker lost the producer's records (unclean)
        broker.state.apply_data(
            parse_header(encode_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=0)),
            0,
        )
        rig.batch(1)
        await rig.close()
        for f in rig.futures[3:]:
            assert isinstance(f.exception(), errors.OutOfOrderSequenceNumberError)
        with pytest.raises(errors.OutOfOrderSequenceNumberError):
            rig.seq.check()

    run(go)


def test_an_unexpected_failure_of_a_sequenced_request_is_fatal_not_a_stall() -> None:
    async def go() -> None:
        broker = FakeBroker()
        broker.hold = False
        broker.inject[0] = FakeBroker.BUG
        rig = Rig(broker)
        rig.batch(0)
        await rig.close()
        assert all(isinstance(f.exception(), RuntimeError) for f in rig.futures)
        # whether it landed is unknown: the partition can continue neither way
        with pytest.raises(errors.OutOfOrderSequenceNumberError):
            rig.seq.check()

    run(go)


def test_max_in_flight_one_keeps_one_batch_in_flight() -> None:
    async def go() -> None:
        broker = FakeBroker()
        rig = Rig(broker, max_in_flight=1)
        rig.batch(0)
        await broker.calls_reach(1)
        rig.batch(1)
        assert rig.drain_now() == {}  # muted while its one batch is in flight
        broker.hold = False
        await broker.answer(0)
        await rig.close()
        assert broker.log == rig.values
        assert [c.sequences for c in broker.calls] == [[0], [3]]

    run(go)


def test_without_idempotence_requests_are_numbered_for_the_brokers_order_wait() -> None:
    # Concurrent calls may be handled in any order and a non-idempotent batch has no sequence
    # the broker could check: each request carries the sender's order key, its number for that
    # broker, and the latest earlier request still unanswered (the broker appends it after
    # that one: services/broker/request_order.py). The requests stay five in flight.
    async def go() -> None:
        broker = FakeBroker()
        rig = Rig(broker, idempotent=False)
        key = rig.sender.order_key
        assert key > 0
        await send_in_separate_calls(broker, rig, 3)

        def order(i: int) -> tuple[int, int, int]:
            r = broker.calls[i].request
            return (r.order_key, r.order_number, r.order_after)

        assert [order(i) for i in range(3)] == [(key, 1, 0), (key, 2, 1), (key, 3, 2)]
        await broker.answer(2)  # the latest answered first: 2 is the latest unanswered
        rig.batch(3)
        await broker.calls_reach(4)
        assert order(3) == (key, 4, 2)
        await broker.answer(0, 1, 3)
        rig.batch(4)  # nothing unanswered: it names no earlier request
        await broker.calls_reach(5)
        assert order(4) == (key, 5, 0)
        broker.hold = False
        await broker.answer(4)
        await rig.close()
        assert sorted(broker.log) == sorted(rig.values)

    run(go)


def test_idempotent_and_single_flight_requests_are_not_numbered() -> None:
    async def go() -> None:
        for rig in (Rig(FakeBroker()), Rig(FakeBroker(), max_in_flight=1, idempotent=False)):
            assert rig.sender.order_key == 0
            await rig.close()

    run(go)
