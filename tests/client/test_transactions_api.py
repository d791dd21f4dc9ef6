"""TransactionManager state machine against a scripted fake coordinator (no network).

The fake records each (method, request) and answers from a script; the real-cluster test of
the transactional producer lives in test_transactions_api_cluster.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from headwater import errors
from headwater.batch import Compression
from headwater.client.accumulator import Accumulator
from headwater.client.idempotence import Sequencer
from headwater.client.transactions import (
    TransactionManager,
    TxnState,
    group_fields,
    offsets_of,
)
from headwater.client.types import TopicPartition
from headwater.v1 import coordinator_pb2, transaction_pb2
from headwater.v1.errors_pb2 import ErrorCode
from tests.helpers.sequenced import Item

pytestmark = pytest.mark.fast

T = TypeVar("T")
TP = TopicPartition("out", 0)


def run(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(fn())


class FakeCoord:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.errors: dict[str, int] = {}
        self.epoch = 0

    async def call(self, key: str, method: str, req: Any, **_kw: Any) -> Any:
        self.calls.append((method, req))
        code = self.errors.pop(method, ErrorCode.NONE)
        if method == "InitProducerId":
            return transaction_pb2.InitProducerIdResponse(
                error_code=code,  # type: ignore[arg-type]
                producer_id=77,
                producer_epoch=self.epoch,
            )
        if method == "AddPartitionsToTxn":
            return transaction_pb2.AddPartitionsToTxnResponse(
                error_code=code,  # type: ignore[arg-type]
                results=[
                    transaction_pb2.AddPartitionsToTxnResult(topic=t.topic, partition=p)
                    for t in req.partitions
                    for p in t.partitions
                ],
            )
        if method == "AddOffsetsToTxn":
            return transaction_pb2.AddOffsetsToTxnResponse(error_code=code)  # type: ignore[arg-type]
        if method == "TxnOffsetCommit":
            return coordinator_pb2.OffsetCommitResponse(error_code=code)  # type: ignore[arg-type]
        if method == "EndTxn":
            if code == ErrorCode.NONE:
                self.epoch += 1
            return transaction_pb2.EndTxnResponse(
                error_code=code,  # type: ignore[arg-type]
                producer_id=77,
                producer_epoch=self.epoch,
            )
        raise AssertionError(method)

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]


class FakePool:
    def coordinator(self, _address: str) -> None:
        raise AssertionError("the fake coordinator answers every call")

    channel = coordinator


def make() -> tuple[TransactionManager, FakeCoord, Sequencer, Accumulator]:
    acc = Accumulator(
        batch_size=4096,
        linger_ms=0,
        buffer_memory=1 << 20,
        max_block_ms=50,
        delivery_timeout_ms=60_000,
        compression=Compression.NONE,
    )
    seq = Sequencer()
    tm = TransactionManager(
        "tx-1",
        60_000,
        seq,
        acc,
        FakePool(),  # type: ignore[arg-type]
        object(),  # type: ignore[arg-type]
        request_timeout_s=1,
        retry_backoff_s=0.001,
    )
    fake = FakeCoord()
    tm.coord = fake  # type: ignore[assignment]
    tm.groups = fake  # type: ignore[assignment]
    return tm, fake, seq, acc


async def noop_flush() -> None:
    return None


def test_calls_out_of_order_are_invalid_txn_state() -> None:
    async def go() -> None:
        tm, fake, _seq, _acc = make()
        with pytest.raises(errors.InvalidTxnStateError):
            tm.begin()
        with pytest.raises(errors.InvalidTxnStateError):
            tm.check_can_send()
        await tm.init()
        with pytest.raises(errors.InvalidTxnStateError):
            await tm.init()
        with pytest.raises(errors.InvalidTxnStateError):
            await tm.commit(noop_flush)
        with pytest.raises(errors.InvalidTxnStateError):
            await tm.abort()
        tm.begin()
        with pytest.raises(errors.InvalidTxnStateError):
            tm.begin()
        assert fake.methods() == ["InitProducerId"]

    run(go)


def test_partition_is_sendable_only_after_add_partitions() -> None:
    async def go() -> None:
        tm, fake, seq, _acc = make()
        await tm.init()
        assert (seq.producer_id, seq.epoch) == (77, 0)
        assert not tm.may_send(TP)  # outside a transaction
        tm.begin()
        woke = asyncio.Event()
        tm.wake_sender = woke.set
        assert not tm.may_send(TP)  # asks the coordinator first
        await asyncio.wait_for(woke.wait(), 5)
        assert tm.may_send(TP)
        add = fake.calls[-1][1]
        assert (add.producer_id, add.producer_epoch) == (77, 0)
        assert [(t.topic, list(t.partitions)) for t in add.partitions] == [("out", [0])]

    run(go)


def test_commit_uses_and_adopts_the_bumped_epoch() -> None:
    async def go() -> None:
        tm, fake, seq, _acc = make()
        await tm.init()
        tm.begin()
        await tm.commit(noop_flush)  # nothing added: no EndTxn, epoch unchanged
        assert fake.methods() == ["InitProducerId"] and seq.epoch == 0
        tm.begin()
        tm.added.add(TP)
        seq.assign(Item(TP, 5))
        flushed = []

        async def flush() -> None:
            flushed.append(1)

        await tm.commit(flush)
        end = fake.calls[-1][1]
        assert fake.methods()[-1] == "EndTxn" and end.committed and end.producer_epoch == 0
        assert flushed == [1]
        assert seq.epoch == 1 and seq.next_seq(TP) == 0  # KIP-890: new epoch, sequences reset
        assert tm.state is TxnState.READY

    run(go)


def test_failed_send_makes_commit_raise_and_abort_recovers() -> None:
    async def go() -> None:
        tm, fake, seq, acc = make()
        await tm.init()
        tm.begin()
        tm.added.add(TP)
        fut = asyncio.get_running_loop().create_future()
        assert acc.try_reserve(10)
        acc.append(TP, b"x", None, None, 1, 10, fut)
        batch = acc.queues[TP][0]
        batch.base_seq = 0  # drained and sent
        acc.queues[TP].clear()
        acc.fail(batch, errors.NotEnoughReplicasError("gave up"))
        with pytest.raises(errors.InvalidTxnStateError) as info:
            await tm.commit(noop_flush)
        assert isinstance(info.value.__cause__, errors.NotEnoughReplicasError)
        with pytest.raises(errors.InvalidTxnStateError):
            tm.check_can_send()
        await tm.abort()
        assert fake.calls[-1][0] == "EndTxn" and not fake.calls[-1][1].committed
        assert tm.state is TxnState.READY and seq.epoch == 1
        tm.begin()  # the next transaction starts clean
        tm.check_can_send()

    run(go)


def test_abort_drops_queued_records() -> None:
    async def go() -> None:
        tm, _fake, _seq, acc = make()
        await tm.init()
        tm.begin()
        fut = asyncio.get_running_loop().create_future()
        assert acc.try_reserve(10)
        acc.append(TP, b"x", None, None, 1, 10, fut)
        await tm.abort()
        assert isinstance(fut.exception(), errors.InvalidTxnStateError)
        assert not acc.incomplete

    run(go)


def test_an_abortable_error_fails_queued_records_at_once() -> None:
    """Once the transaction must abort, queued records can never be sent (the gate is shut):
    they fail now, not at their delivery timeout (an application awaiting them before
    commit/abort — the bounce test's copier — was held 120 s)."""

    async def go() -> None:
        tm, _fake, _seq, acc = make()
        await tm.init()
        tm.begin()
        fut = asyncio.get_running_loop().create_future()
        assert acc.try_reserve(10)
        acc.append(TP, b"x", None, None, 1, 10, fut)
        tm.abortable(errors.RequestTimedOutError("AddPartitionsToTxn timed out"))
        await asyncio.sleep(0)  # the failing runs on the next loop iteration
        assert fut.done() and isinstance(fut.exception(), errors.InvalidTxnStateError)
        assert not acc.incomplete
        await tm.abort()
        assert tm.state is TxnState.READY

    run(go)


def test_a_batch_re_queued_after_the_abortable_error_fails_too() -> None:
    """A batch in flight when the transaction had to abort comes back for a retry after the
    queue was emptied: the sender's next may_send() fails it at once as well."""

    async def go() -> None:
        tm, _fake, _seq, acc = make()
        await tm.init()
        tm.begin()
        tm.added.add(TP)
        tm.abortable(errors.RequestTimedOutError("a send timed out"))
        await asyncio.sleep(0)  # the first failing pass (nothing queued yet)
        fut = asyncio.get_running_loop().create_future()
        assert acc.try_reserve(10)
        acc.append(TP, b"x", None, None, 1, 10, fut)  # the retry, queued again
        assert tm.may_send(TP) is False
        await asyncio.sleep(0)
        assert fut.done() and isinstance(fut.exception(), errors.InvalidTxnStateError)
        await tm.abort()
        assert tm.state is TxnState.READY

    run(go)


def test_a_definite_answer_to_a_re_sent_commit_allows_abort_again() -> None:
    async def go() -> None:
        tm, fake, _seq, _acc = make()
        await tm.init()
        tm.begin()
        tm.added.add(TP)
        fake.errors["EndTxn"] = ErrorCode.REQUEST_TIMED_OUT
        with pytest.raises(errors.RequestTimedOutError):
            await tm.commit(noop_flush)
        fake.errors["EndTxn"] = ErrorCode.INVALID_TXN_STATE  # definite, not fatal
        with pytest.raises(errors.InvalidTxnStateError):
            await tm.commit(noop_flush)
        assert tm.unfinished is None
        await tm.abort()  # allowed: the outcome is known
        assert tm.state is TxnState.READY

    run(go)


def test_abort_drops_a_sequenced_batch_waiting_for_a_retry() -> None:
    async def go() -> None:
        tm, fake, _seq, acc = make()
        await tm.init()
        tm.begin()
        tm.added.add(TP)
        fut = asyncio.get_running_loop().create_future()
        assert acc.try_reserve(10)
        acc.append(TP, b"x", None, None, 1, 10, fut)
        acc.queues[TP][0].base_seq = 0  # sent once, re-enqueued for a retry
        tm.abortable(errors.RequestTimedOutError("slow"))
        await asyncio.wait_for(tm.abort(), 5)
        assert isinstance(fut.exception(), errors.InvalidTxnStateError)
        assert fake.methods()[-1] == "EndTxn" and tm.state is TxnState.READY

    run(go)


def test_fenced_end_txn_is_fatal() -> None:
    async def go() -> None:
        tm, fake, seq, _acc = make()
        await tm.init()
        tm.begin()
        tm.added.add(TP)
        fake.errors["EndTxn"] = ErrorCode.PRODUCER_FENCED
        with pytest.raises(errors.ProducerFencedError):
            await tm.commit(noop_flush)
        with pytest.raises(errors.ProducerFencedError):
            seq.check()
        with pytest.raises(errors.ProducerFencedError):
            tm.begin()

    run(go)


def test_unanswered_commit_is_only_re_sent_never_aborted() -> None:
    """A commit whose EndTxn timed out (the coordinator answers once every marker is written,
    which waits out a leader's failover) may be committing: abort() and begin() refuse, and
    commit() again re-sends EndTxn(commit) at the same epoch. Before, abort() sent
    EndTxn(abort), which the coordinator answers PRODUCER_FENCED once the commit completed:
    a fatal error (the bounce test's copier exited 3 and copied nothing more)."""

    async def go() -> None:
        tm, fake, seq, _acc = make()
        await tm.init()
        tm.begin()
        tm.added.add(TP)
        fake.errors["EndTxn"] = ErrorCode.REQUEST_TIMED_OUT
        with pytest.raises(errors.RequestTimedOutError):
            await tm.commit(noop_flush)
        with pytest.raises(errors.InvalidTxnStateError, match="call commit_transaction"):
            await tm.abort()
        with pytest.raises(errors.InvalidTxnStateError, match="call commit_transaction"):
            tm.begin()
        await tm.commit(noop_flush)
        ends = [r for m, r in fake.calls if m == "EndTxn"]
        assert [(r.committed, r.producer_epoch) for r in ends] == [(True, 0), (True, 0)]
        assert tm.state is TxnState.READY and seq.epoch == 1
        tm.begin()  # the next transaction starts normally

    run(go)


def test_unanswered_abort_is_re_sent_by_abort() -> None:
    async def go() -> None:
        tm, fake, _seq, _acc = make()
        await tm.init()
        tm.begin()
        tm.added.add(TP)
        fake.errors["EndTxn"] = ErrorCode.REQUEST_TIMED_OUT
        with pytest.raises(errors.RequestTimedOutError):
            await tm.abort()
        with pytest.raises(errors.InvalidTxnStateError, match="call abort_transaction"):
            await tm.commit(noop_flush)
        await tm.abort()
        ends = [r.committed for m, r in fake.calls if m == "EndTxn"]
        assert ends == [False, False] and tm.state is TxnState.READY

    run(go)


def test_send_offsets_adds_the_group_then_commits_offsets_to_it() -> None:
    async def go() -> None:
        tm, fake, _seq, _acc = make()
        await tm.init()
        tm.begin()

        class ConsumerLike:
            group_id = "g1"
            generation = 4
            member_id = "m-1"

        await tm.send_offsets({TopicPartition("in", 2): 41}, ConsumerLike())
        assert fake.methods()[-2:] == ["AddOffsetsToTxn", "TxnOffsetCommit"]
        add, commit = fake.calls[-2][1], fake.calls[-1][1]
        assert add.group_id == "g1" and add.producer_id == 77
        assert (commit.group_id, commit.generation_id, commit.member_id) == ("g1", 4, "m-1")
        assert [(p.topic, p.partition, p.offset) for p in commit.partitions] == [("in", 2, 41)]
        await tm.commit(noop_flush)  # offsets only: EndTxn still runs
        assert fake.methods()[-1] == "EndTxn"

    run(go)


def test_offsets_and_group_metadata_validation() -> None:
    assert offsets_of({("t", 1): 5}) == {TopicPartition("t", 1): 5}
    with pytest.raises(errors.InvalidRequestError):
        offsets_of({("t", 1): -1})
    with pytest.raises(errors.InvalidRequestError):
        offsets_of([("t", 1)])
    assert group_fields("g") == ("g", -1, "")
    with pytest.raises(errors.InvalidGroupIdError):
        group_fields("")
