"""Idempotent producer bookkeeping: sequences, in-flight limit, retry order, fatal errors.

Pure logic with fakes: the Sequencer, Accumulator.drain with a Producing, and the Sender's
handling of produce answers (a fake produce call returns scripted ProduceResponses).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from headwater import errors
from headwater.batch import iter_headers, parse_header
from headwater.client import idempotence
from headwater.client.accumulator import Accumulator
from headwater.client.idempotence import Producing, Sequencer, resolve_enable_idempotence
from headwater.client.producer import AsyncProducer
from headwater.client.types import TopicPartition
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode
from tests.client.sender_helpers import accumulator
from tests.client.sender_helpers import sender as make_sender
from tests.helpers.sequenced import FakeMetadata, Item

T = TypeVar("T")
TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def run(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(fn())


# ---------------------------------------------------------------- Sequencer


def test_sequences_per_partition_advance_by_record_count() -> None:
    s = Sequencer()
    s.reset(7, 0)
    assert s.assign(Item(TP, 3)) == 0
    assert s.assign(Item(TP, 2)) == 3
    assert s.assign(Item(TP1, 4)) == 0
    assert s.next_seq(TP) == 5
    s.reset(7, 1)  # a new epoch restarts every partition at 0
    assert s.assign(Item(TP, 1)) == 0


def test_sequence_wraps_at_2_pow_31() -> None:
    s = Sequencer()
    s.reset(1, 0)
    s.parts[TP] = idempotence.PartitionSeq(next_seq=(1 << 31) - 2)
    it = Item(TP, 5)
    assert s.assign(it) == (1 << 31) - 2
    assert s.next_seq(TP) == 3
    s.acked(it)
    assert s.parts[TP].last_acked == 2
    assert s.predecessor_acked(TP, 3)  # an OUT_OF_ORDER for 3 sent now would be fatal


def test_predecessor_acked_tells_a_gap_from_an_overtaking_request() -> None:
    s = Sequencer()
    s.reset(1, 0)
    a, b = Item(TP, 10), Item(TP, 10)
    s.assign(a)
    s.assign(b)
    assert not s.predecessor_acked(TP, b.base_seq)  # a pending: b may have overtaken it
    s.acked(a)
    assert s.predecessor_acked(TP, b.base_seq)  # a acknowledged: out of order = records lost
    assert s.predecessor_acked(TP1, 0)  # sequence 0 has no predecessor to wait for


def test_failed_state_raises_the_fatal_error() -> None:
    s = Sequencer()
    s.check()
    first = errors.OutOfOrderSequenceNumberError("gap")
    s.fail(first)
    s.fail(errors.ProducerFencedError("later"))
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        s.check()


def test_bad_producer_id_from_the_broker_is_refused() -> None:
    s = Sequencer()
    with pytest.raises(errors.InvalidRequestError):
        s.reset(-1, 0)
    assert not s.has_pid


# ---------------------------------------------------------------- configuration


def test_enable_idempotence_resolution() -> None:
    assert resolve_enable_idempotence(None, True, 5, False)
    assert not resolve_enable_idempotence(None, False, 5, False)
    assert not resolve_enable_idempotence(None, True, 0, False)
    assert not resolve_enable_idempotence(False, True, 5, False)
    assert resolve_enable_idempotence(None, True, 5, True)
    with pytest.raises(errors.InvalidConfigError):
        resolve_enable_idempotence(True, False, 5, False)
    with pytest.raises(errors.InvalidConfigError):
        resolve_enable_idempotence(True, True, 0, False)
    with pytest.raises(errors.InvalidConfigError):
        resolve_enable_idempotence(False, True, 5, True)


def test_producer_defaults_are_acks_all_and_idempotent() -> None:
    p = AsyncProducer("127.0.0.1:1")
    assert p.acks == broker_pb2.ACKS_ALL
    assert p.enable_idempotence
    assert not AsyncProducer("127.0.0.1:1", acks=1).enable_idempotence
    with pytest.raises(errors.InvalidConfigError):
        AsyncProducer("127.0.0.1:1", acks=1, enable_idempotence=True)
    with pytest.raises(errors.InvalidConfigError):
        AsyncProducer("127.0.0.1:1", enable_idempotence=True, retries=0)
    with pytest.raises(errors.InvalidConfigError):
        AsyncProducer("127.0.0.1:1", max_in_flight=6)
    assert AsyncProducer("127.0.0.1:1", acks=1, max_in_flight=10).max_request_size > 0


# ---------------------------------------------------------------- draining


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_acc(clock: Clock) -> Accumulator:
    return accumulator(linger_ms=0, buffer_memory=1 << 20, clock=clock)


def fill(acc: Accumulator, tp: TopicPartition, batches: int, per: int = 3) -> list[Any]:
    loop = asyncio.get_running_loop()
    futs = []
    for _ in range(batches):
        for i in range(per):
            fut = loop.create_future()
            assert acc.try_reserve(20)
            acc.append(tp, b"v%d" % i, None, None, 1, 20, fut)
            futs.append(fut)
        acc.seal_open(tp)
    return futs


def test_drain_numbers_batches_and_takes_at_most_five_per_partition() -> None:
    async def go() -> None:
        clock = Clock()
        acc = make_acc(clock)
        seq = Sequencer()
        seq.reset(42, 3)
        producing = Producing(seq, transactional=False)
        fill(acc, TP, 7)
        out, _next, _unknown = acc.drain(lambda _tp: 0, lambda _l: True, set(), 1 << 20, producing)
        taken = out[0]
        assert len(taken) == idempotence.MAX_IN_FLIGHT_IDEMPOTENT
        for k, b in enumerate(taken):
            h = parse_header(b.encoded or b"", 0)
            assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3, 3 * k)
            assert not h.is_transactional
        assert seq.next_seq(TP) == 15
        # the 2 left are numbered only when drained
        assert all(b.base_seq < 0 for b in acc.queues[TP])

    run(go)


def test_reenqueue_restores_sequence_order_whatever_the_failure_order() -> None:
    async def go() -> None:
        clock = Clock()
        acc = make_acc(clock)
        seq = Sequencer()
        seq.reset(1, 0)
        producing = Producing(seq, transactional=True)
        fill(acc, TP, 4)
        out, _n, _u = acc.drain(lambda _tp: 0, lambda _l: True, set(), 1 << 20, producing)
        b0, b1, b2, b3 = out[0]
        assert parse_header(b0.encoded or b"", 0).is_transactional
        bytes_before = [b.encoded for b in (b0, b1, b2, b3)]
        fill(acc, TP, 1)  # a new, unnumbered batch queued meanwhile
        for b in (b2, b0, b3, b1):
            acc.reenqueue(b, clock.now)
        # retries go out alone, oldest first, each once the one before it is acknowledged
        for k, expected in enumerate((0, 3, 6, 9)):
            again, _n, _u = acc.drain(lambda _tp: 0, lambda _l: True, set(), 1 << 20, producing)
            assert [b.base_seq for b in again[0]] == [expected]
            assert again[0][0].encoded == bytes_before[k]  # same bytes resent
            if k < 3:
                nothing, _n, _u = acc.drain(
                    lambda _tp: 0, lambda _l: True, set(), 1 << 20, producing
                )
                assert nothing == {}  # the next retry waits for this one
                seq.acked(again[0][0])
        # the fresh batch may follow the last retry in flight, never in the same request (one
        # base offset per partition answers a request: the original one only if every batch
        # of it is a duplicate)
        fresh, _n, _u = acc.drain(lambda _tp: 0, lambda _l: True, set(), 1 << 20, producing)
        assert [b.base_seq for b in fresh[0]] == [12]

    run(go)


# ---------------------------------------------------------------- sender answers


class FakePool:
    """raw_produce answers each request with the next scripted per-partition error code."""

    def __init__(self, script: list[int]) -> None:
        self.script = script
        self.requests = 0
        self.next_offset = 100

    def raw_produce(self, _address: str) -> Any:
        async def call(request: bytes, timeout: float) -> broker_pb2.ProduceResponse:
            req = broker_pb2.ProduceRequest.FromString(request)
            self.requests += 1
            code = self.script.pop(0) if self.script else ErrorCode.NONE
            results = []
            for p in req.partitions:
                results.append(
                    broker_pb2.PartitionProduceResult(
                        topic=p.topic,
                        partition=p.partition,
                        error_code=code,  # type: ignore[arg-type]
                        base_offset=self.next_offset if code == ErrorCode.NONE else -1,
                        log_append_time=-1,
                    )
                )
                if code == ErrorCode.NONE:
                    self.next_offset += sum(h.record_count for _, h in iter_headers(p.records))
            return broker_pb2.ProduceResponse(partitions=results)

        return call


async def run_sender(
    script: list[int], batches: int, *, acked_before: bool = False
) -> tuple[list[Any], Sequencer, FakePool]:
    acc = make_acc(Clock())
    acc.clock = time.monotonic  # retries wait retry_backoff_ms (1 ms) of real time
    seq = Sequencer()
    seq.reset(9, 0)
    if acked_before:  # a first batch of 1 record already acknowledged
        first = Item(TP, 1)
        seq.assign(first)
        seq.acked(first)
    pool = FakePool(script)
    sender = make_sender(acc, FakeMetadata(), pool, producing=Producing(seq, transactional=False))
    futs = fill(acc, TP, batches)
    task = asyncio.get_running_loop().create_task(sender.run())
    await asyncio.wait(futs, timeout=5)
    sender.closing = True
    sender.wake()
    await asyncio.wait_for(task, 5)
    return futs, seq, pool


def test_retriable_error_resends_in_order_and_acks_the_sequences() -> None:
    async def go() -> None:
        futs, seq, pool = await run_sender(
            [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_LEADER_OR_FOLLOWER], 2
        )
        assert [f.result().offset for f in futs] == list(range(100, 106))
        assert pool.requests == 4  # one request per batch, then each resent alone, in order
        assert seq.parts[TP].last_acked == 5

    run(go)


def test_out_of_order_after_an_acked_predecessor_is_fatal_for_every_send() -> None:
    async def go() -> None:
        futs, seq, _pool = await run_sender(
            [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER], 2, acked_before=True
        )
        for f in futs:
            assert isinstance(f.exception(), errors.OutOfOrderSequenceNumberError)
        with pytest.raises(errors.OutOfOrderSequenceNumberError):
            seq.check()

    run(go)


def test_unknown_producer_for_sequence_zero_is_fatal() -> None:
    async def go() -> None:
        futs, seq, _pool = await run_sender([ErrorCode.UNKNOWN_PRODUCER_ID], 1)
        assert all(isinstance(f.exception(), errors.UnknownProducerIdError) for f in futs)
        with pytest.raises(errors.UnknownProducerIdError):
            seq.check()

    run(go)


def test_fenced_epoch_is_fatal() -> None:
    async def go() -> None:
        futs, seq, _pool = await run_sender([ErrorCode.INVALID_PRODUCER_EPOCH], 1)
        assert all(isinstance(f.exception(), errors.InvalidProducerEpochError) for f in futs)
        with pytest.raises(errors.InvalidProducerEpochError):
            seq.check()

    run(go)


def test_terminal_in_band_error_releases_the_partition_sequence() -> None:
    async def go() -> None:
        futs, seq, _pool = await run_sender([ErrorCode.CORRUPT_MESSAGE], 1)
        assert all(isinstance(f.exception(), errors.HeadwaterError) for f in futs)
        assert seq.next_seq(TP) == 0  # nothing appended: the next batch reuses 0
        seq.check()  # not fatal

    run(go)
