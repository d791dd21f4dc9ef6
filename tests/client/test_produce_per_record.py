"""The per-record path (issue 17): ``Accumulator.append_record`` from several threads, lazy
``RecordFuture``s resolving from their batch's result, per-record callbacks, back-pressure
that blocks a caller thread up to ``max_block_ms``; and the blocking ``Producer.send`` against
a real broker from several threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from headwater.batch import decode_batches
from headwater.client.accumulator import RECORD_OVERHEAD
from headwater.client.errors import BufferExhaustedError, ProducerClosedError
from headwater.client.record_future import RecordFuture
from headwater.client.sync import AdminClient, Producer
from headwater.client.types import RecordMetadata, TopicPartition
from headwater.errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from tests.client.per_record_helpers import (
    LoopThread,
    complete_in_order,
    drain_all,
    make_acc,
    read_all,
)

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


@pytest.fixture
def lt() -> Iterator[LoopThread]:
    t = LoopThread()
    yield t
    t.stop()


def test_appends_from_several_threads_keep_each_threads_order_and_resolve_offsets(
    lt: LoopThread,
) -> None:
    acc = make_acc(lt)
    threads, per = 4, 2000
    futures: dict[int, list[tuple[bytes, RecordFuture]]] = {i: [] for i in range(threads)}
    start = threading.Barrier(threads)

    def writer(t: int) -> None:
        start.wait(10)
        for i in range(per):
            v = f"{t}:{i}".encode()
            tp = TP if i % 2 == 0 else TP1
            futures[t].append(
                (v, acc.append_record(tp, v, None, None, 7, RECORD_OVERHEAD + len(v), None))
            )

    ws = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in ws:
        w.start()
    for w in ws:
        w.join(60)
    batches = drain_all(lt, acc)
    assert sum(b.count for b in batches) == threads * per
    # what each partition holds, in offset order, as the broker would store it
    stored: dict[TopicPartition, list[bytes]] = {TP: [], TP1: []}
    for b in batches:
        [decoded] = decode_batches(b.encoded or b"")
        stored[b.tp] += decoded.values()
    assert all(not f.done() for fs in futures.values() for _v, f in fs)  # nothing acked yet
    complete_in_order(lt, acc, batches)
    for fs in futures.values():
        last: dict[TopicPartition, int] = {}
        for v, f in fs:
            meta = f.result(0)
            tp = TopicPartition(meta.topic, meta.partition)
            assert stored[tp][meta.offset] == v  # the offset the future reports holds it
            assert meta.offset > last.get(tp, -1)  # each thread's order kept per partition
            last[tp] = meta.offset
            assert meta.timestamp == 7
    assert acc.used == 0 and not acc.incomplete


def test_futures_are_lazy_and_resolve_from_the_batch_result(lt: LoopThread) -> None:
    acc = make_acc(lt)
    fs = [acc.append_record(TP, b"v%d" % i, None, None, 100 + i, 20, None) for i in range(3)]
    batch = fs[0]._outcome
    assert all(f._outcome is batch for f in fs)  # one shared outcome, nothing per record
    assert not fs[1].done() and fs[1].running() and not fs[1].cancel()
    with pytest.raises(TimeoutError):
        fs[1].result(timeout=0.01)
    seen: list[RecordMetadata] = []
    fs[2].add_done_callback(lambda f: seen.append(f.result()))
    (b,) = drain_all(lt, acc)
    lt.call(acc.complete, b, 41)
    assert [f.result(1) for f in fs] == [RecordMetadata("t", 0, 41 + i, 100 + i) for i in range(3)]
    assert seen == [RecordMetadata("t", 0, 43, 102)]
    late: list[RecordFuture] = []
    fs[0].add_done_callback(late.append)  # already done: called at once
    assert late == [fs[0]]


def test_failed_batch_fails_its_futures_and_callbacks(lt: LoopThread) -> None:
    acc = make_acc(lt)
    calls: list[tuple[Any, Any]] = []
    f = acc.append_record(TP, b"x", None, None, 1, 13, lambda m, e: calls.append((m, e)))
    (b,) = drain_all(lt, acc)
    err = NotLeaderOrFollowerError("gone")
    lt.call(acc.fail, b, err)
    assert f.exception(1) is err
    with pytest.raises(NotLeaderOrFollowerError):
        f.result(1)
    assert calls == [(None, err)]


def test_record_callbacks_run_in_record_order_on_the_loop(lt: LoopThread) -> None:
    acc = make_acc(lt)
    calls: list[tuple[int, str]] = []

    def cb(meta: RecordMetadata | None, exc: BaseException | None) -> None:
        assert exc is None and meta is not None
        calls.append((meta.offset, threading.current_thread().name))

    for i in range(5):
        acc.append_record(TP, b"r", None, None, 1, 13, cb if i != 2 else None)
    (b,) = drain_all(lt, acc)
    lt.call(acc.complete, b, 10)
    assert [o for o, _ in calls] == [10, 11, 13, 14]
    assert {name for _, name in calls} == {lt.thread.name}


def test_awaiting_a_record_future_on_the_loop(lt: LoopThread) -> None:
    acc = make_acc(lt)
    f = acc.append_record(TP, b"x", None, None, 5, 13, None)

    async def wait() -> RecordMetadata:
        return await f

    waiting = asyncio.run_coroutine_threadsafe(wait(), lt.loop)
    (b,) = drain_all(lt, acc)
    assert not waiting.done()
    lt.call(acc.complete, b, 3)
    assert waiting.result(5) == RecordMetadata("t", 0, 3, 5)


def test_buffer_full_blocks_the_caller_thread_until_memory_is_released(lt: LoopThread) -> None:
    acc = make_acc(lt, buffer_memory=4096, batch_size=1024, max_block_ms=30_000)
    first = [acc.append_record(TP, b"a" * 900, None, None, 1, 1000, None) for _ in range(4)]
    got: list[RecordFuture] = []
    blocked = threading.Thread(
        target=lambda: got.append(acc.append_record(TP, b"b" * 900, None, None, 1, 1000, None))
    )
    blocked.start()
    blocked.join(0.2)
    assert blocked.is_alive() and not got  # waiting for buffer memory
    batches = drain_all(lt, acc)  # a blocked writer makes every batch ready
    complete_in_order(lt, acc, batches)
    blocked.join(10)
    assert not blocked.is_alive() and len(got) == 1
    assert all(f.done() for f in first)


def test_buffer_full_times_out_with_a_typed_error_and_frees_nothing_wrongly(
    lt: LoopThread,
) -> None:
    acc = make_acc(lt, buffer_memory=2048, batch_size=1024, max_block_ms=50)
    acc.append_record(TP, b"a" * 900, None, None, 1, 1000, None)
    acc.append_record(TP, b"a" * 900, None, None, 1, 1000, None)
    with pytest.raises(BufferExhaustedError):
        acc.append_record(TP, b"b" * 900, None, None, 1, 1000, None)
    assert acc.used == 2000 and not acc.memory_blocked
    assert sum(b.count for b in acc.queues[TP]) == 2  # the refused record is not buffered


def test_buffer_full_on_the_loop_raises_at_once(lt: LoopThread) -> None:
    acc = make_acc(lt, buffer_memory=1024, batch_size=1024, max_block_ms=60_000)
    acc.append_record(TP, b"a" * 900, None, None, 1, 1000, None)
    with pytest.raises(BufferExhaustedError):
        lt.call(acc.append_record, TP, b"b", None, None, 1, 100, None)


# ------------------------------------------------------------ against a broker


def test_blocking_send_from_several_threads(cluster: Any) -> None:
    topic = "per-record-threads"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topic(topic, 3)
    threads, per = 4, 3000
    futures: dict[int, list[RecordFuture]] = {}
    acks: list[RecordMetadata] = []
    with Producer(cluster.bootstrap, acks="all", linger_ms=2, batch_size=16384) as p:

        def writer(t: int) -> None:
            futures[t] = [
                p.send(
                    topic,
                    f"{t}:{i}".encode(),
                    key=f"k{t}".encode(),
                    callback=lambda m, e: acks.append(m) if m is not None else None,
                )
                for i in range(per)
            ]

        ws = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
        for w in ws:
            w.start()
        for w in ws:
            w.join(120)
        p.flush(60)
        metas = {t: [f.result(0) for f in fs] for t, fs in futures.items()}
    assert len(acks) == threads * per
    records = asyncio.run(read_all(cluster.bootstrap, topic, 3, threads * per))
    assert len(records) == threads * per
    at = {(r.partition, r.offset): r.value for r in records}
    for t, ms in metas.items():
        # one key per thread: one partition, offsets in send order, each holding its value
        assert len({m.partition for m in ms}) == 1
        assert [m.offset for m in ms] == sorted(m.offset for m in ms)
        for i, m in enumerate(ms):
            assert at[(m.partition, m.offset)] == f"{t}:{i}".encode()


def test_appends_after_close_are_refused(lt: LoopThread) -> None:
    acc = make_acc(lt)
    f = acc.append_record(TP, b"x", None, None, 1, 13, None)
    acc.close_appends(ProducerClosedError("producer is closed"))
    with pytest.raises(ProducerClosedError):
        acc.append_record(TP, b"y", None, None, 1, 13, None)
    lt.call(acc.fail_all, ProducerClosedError("closed before delivery"))
    assert isinstance(f.exception(1), ProducerClosedError)
    assert acc.used == 0


def test_produce_refuses_a_partition_out_of_range_and_buffers_nothing(cluster: Any) -> None:
    topic = "per-record-range"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topic(topic, 2)
    with Producer(cluster.bootstrap, acks=1, partitioner=lambda _k, _n, _t: -1) as p:
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send(topic, b"x", key=b"k")  # the custom partitioner's -1
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send(topic, b"x", partition=2)
        assert p.send(topic, b"ok", partition=1).result(30).offset == 0
