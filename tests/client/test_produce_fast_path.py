"""The per-record produce call's two implementations (issue 17): the C module's common case
(:mod:`headwater.client._cproduce`, bound as ``AsyncProducer.produce`` when built) and the
Python method it falls back to. Every behaviour test runs both (``impl``), and one test feeds
both the same calls and compares the batches they build, so that they cannot drift."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.batch import decode_batches
from headwater.client import producer as producer_module
from headwater.client.accumulator import Accumulator
from headwater.client.buffer_memory import BufferMemory
from headwater.client.errors import BufferExhaustedError, ProducerClosedError
from headwater.client.producer import AsyncProducer
from headwater.client.record_future import RecordFuture
from headwater.client.sync import AdminClient, Producer
from headwater.client.types import RecordMetadata, TopicPartition
from headwater.errors import OutOfOrderSequenceNumberError
from tests.client.per_record_helpers import (
    LoopThread,
    complete_in_order,
    drain_all,
    make_acc,
    read_all,
    run_threads,
)
from tests.helpers.wait import wait_for
from tests.helpers.without_c import run_without_c

FastProduce = producer_module.FastProduce
#: the implementations this install has ("c" whenever the extension was built: make install)
IMPLS = ["python"] + (["c"] if FastProduce is not None else [])
TOPIC = "t"


@pytest.fixture
def lt() -> Iterator[LoopThread]:
    t = LoopThread()
    yield t
    t.stop()


def wire(lt: LoopThread, impl: str, acc: Accumulator, **config: Any) -> AsyncProducer:
    """An AsyncProducer whose produce() appends to ``acc`` (topic "t", 2 partitions, sticky
    partition 0), with the C path bound (impl "c") or not: the parts start() would build,
    without a cluster."""
    config.setdefault("acks", 1)

    def build() -> AsyncProducer:
        return AsyncProducer("127.0.0.1:1", **config)

    p: AsyncProducer = lt.call(build)
    p._acc = acc
    p._tps[TOPIC] = [TopicPartition(TOPIC, i) for i in range(2)]
    assert p._sticky_current is not None
    p._sticky_current[TOPIC] = 0
    if impl == "c":
        p._bind_fast_produce()
        assert FastProduce is not None and type(p.produce) is FastProduce
    else:
        assert "produce" not in vars(p)
    return p


def test_the_c_module_is_built_by_the_install() -> None:
    # make install builds it (pyproject's ext-modules); optional only for compiler-less installs
    assert "c" in IMPLS


def _script(lt: LoopThread, impl: str) -> tuple[list[Any], list[tuple[int, int]], list[int]]:
    """The same calls through one implementation: what the batches hold (all but timestamps),
    where each future points, and each record's timestamp."""
    acc = make_acc(lt, batch_size=2048)
    p = wire(lt, impl, acc)
    futures: list[RecordFuture] = []
    for i in range(600):
        if i == 150:
            # the topic's max.message.bytes (1,280: sealed at 1,200) from now on
            lt.call(lambda: acc.limit_batches(TOPIC, 1280))
        if i == 300:
            assert p._sticky_current is not None
            p._sticky_current[TOPIC] = 1  # the sticky partitioner moved on
        value = bytes([i % 251]) * ((i * 37) % 200)
        if i % 50 == 7:
            futures.append(p.produce(TOPIC, value, key=b"k%d" % i))
        elif i % 70 == 9:
            futures.append(p.produce(TOPIC, value, headers=[("h", b"%d" % i)]))
        elif i % 90 == 11:
            futures.append(p.produce(TOPIC, value, timestamp=123))
        else:
            futures.append(p.produce(TOPIC, value))
    with acc.lock:
        batches = [b for dq in acc.queues.values() for b in dq]
        shape: list[Any] = [
            (b.tp, b.count, b.nbytes, b.limit, b.sealed, list(b.values), b.keys, b.headers)
            for b in batches
        ]
        outcomes = [b.outcome for b in batches]
        where = [(outcomes.index(f._outcome), f._index) for f in futures]
        stamps = [b.timestamp_at(i) for b in batches for i in range(b.count)]
    shape.append(acc.used)
    return shape, where, stamps


def test_c_and_python_paths_build_the_same_batches(lt: LoopThread) -> None:
    t0 = time.time_ns() // 1_000_000
    results = {impl: _script(lt, impl) for impl in IMPLS}
    t1 = time.time_ns() // 1_000_000
    shapes = {impl: r[0] for impl, r in results.items()}
    wheres = {impl: r[1] for impl, r in results.items()}
    assert len(shapes["python"]) > 4  # several batches per partition were sealed
    limits = [b[3] for b in shapes["python"][:-1]]
    assert limits[0] == 2048 and limits[-1] == 1200  # batch_size, then the topic's limit
    assert all(b[2] <= b[3] for b in shapes["python"][:-1])  # no batch over its limit
    for impl in IMPLS:
        assert shapes[impl] == shapes["python"]
        assert wheres[impl] == wheres["python"]
        stamps = results[impl][2]
        assert len(stamps) == 600
        assert all(s == 123 or t0 <= s <= t1 for s in stamps)
        explicit = [i for i in range(600) if i % 50 != 7 and i % 70 != 9 and i % 90 == 11]
        assert stamps.count(123) == len(explicit)


@pytest.mark.parametrize("impl", IMPLS)
def test_produced_records_resolve_with_offsets_and_timestamps(lt: LoopThread, impl: str) -> None:
    acc = make_acc(lt)
    p = wire(lt, impl, acc)
    before = time.time_ns() // 1_000_000
    fs = [p.produce(TOPIC, b"v%d" % i) for i in range(50)]
    after = time.time_ns() // 1_000_000
    assert all(type(f) is RecordFuture and not f.done() for f in fs)
    assert [f._index for f in fs] == list(range(50))
    batches = drain_all(lt, acc)
    complete_in_order(lt, acc, batches)
    metas = [f.result(1) for f in fs]
    assert [(m.topic, m.partition, m.offset) for m in metas] == [(TOPIC, 0, i) for i in range(50)]
    assert all(before <= m.timestamp <= after for m in metas)
    assert acc.used == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_non_bytes_values_and_a_callback_go_through_the_python_path(
    lt: LoopThread, impl: str
) -> None:
    # bytearray, memoryview and None values (the C path takes exact bytes only) and a record
    # with a callback land in the same batch, in call order, with the buffer memory of each
    acc = make_acc(lt)
    p = wire(lt, impl, acc)
    called: list[tuple[Any, Any]] = []
    values: list[Any] = [b"a", bytearray(b"bb"), memoryview(b"ccc"), None, b"dddd", b"e"]
    fs = [p.produce(TOPIC, v) for v in values[:-1]]
    fs.append(p.produce(TOPIC, values[-1], callback=lambda m, e: called.append((m, e))))
    assert acc.used == sum(12 + (len(v) if v is not None else 0) for v in values)
    [batch] = drain_all(lt, acc)
    assert _values(batch) == [b"a", b"bb", b"ccc", None, b"dddd", b"e"]
    complete_in_order(lt, acc, [batch])
    assert [f.result(1).offset for f in fs] == list(range(len(values)))
    wait_for(lambda: called, timeout=10, what="the record's callback")
    assert called[0][1] is None and called[0][0].offset == len(values) - 1
    assert acc.used == 0


def test_a_transactional_producer_keeps_the_python_produce(lt: LoopThread) -> None:
    # FastProduce does not check the transaction's state: never bound for a transactional
    # producer (nor for a custom partitioner)
    acc = make_acc(lt)
    p = wire(lt, "python", acc)
    p._txn = object()  # type: ignore[assignment]
    p._bind_fast_produce()
    assert "produce" not in vars(p)
    q = lt.call(lambda: AsyncProducer("127.0.0.1:1", acks=1, partitioner=lambda k, n, t: 0))
    q._acc = acc
    q._bind_fast_produce()
    assert "produce" not in vars(q)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_new_batch_and_a_sealed_batch_wake_the_sender(lt: LoopThread, impl: str) -> None:
    acc = make_acc(lt, batch_size=1024)
    p = wire(lt, impl, acc)
    woken = threading.Event()
    acc.wakeup = woken.set
    p.produce(TOPIC, b"x" * 100)  # a new batch: its linger deadline
    assert woken.wait(10)
    woken.clear()
    for _ in range(20):
        p.produce(TOPIC, b"x" * 100)
        if any(b.sealed for b in acc.queues[TopicPartition(TOPIC, 0)]):
            break
    assert any(b.sealed for b in acc.queues[TopicPartition(TOPIC, 0)])
    assert woken.wait(10)


@pytest.mark.parametrize("impl", IMPLS)
def test_full_buffer_blocks_the_caller_until_memory_is_released(lt: LoopThread, impl: str) -> None:
    acc = make_acc(lt, buffer_memory=4096, batch_size=2048, max_block_ms=30_000)
    p = wire(lt, impl, acc)
    first = [p.produce(TOPIC, b"a" * 488) for _ in range(8)]  # 500 bytes each: 4000 in use
    assert acc.used == 4000
    got: list[RecordFuture] = []
    blocked = threading.Thread(target=lambda: got.append(p.produce(TOPIC, b"b" * 488)))
    blocked.start()
    wait_for(lambda: acc.memory_blocked, timeout=10, what="the writer to wait for memory")
    assert blocked.is_alive() and not got
    complete_in_order(lt, acc, drain_all(lt, acc))  # a blocked writer makes all ready
    blocked.join(10)
    assert not blocked.is_alive() and len(got) == 1
    assert all(f.done() for f in first)


@pytest.mark.parametrize("impl", IMPLS)
def test_full_buffer_times_out_and_on_the_loop_raises_at_once(lt: LoopThread, impl: str) -> None:
    acc = make_acc(lt, buffer_memory=2048, batch_size=4096, max_block_ms=50)
    p = wire(lt, impl, acc)
    p.produce(TOPIC, b"a" * 988)
    p.produce(TOPIC, b"a" * 988)
    with pytest.raises(BufferExhaustedError):
        p.produce(TOPIC, b"b" * 988)
    assert acc.used == 2000 and not acc.memory_blocked
    acc.max_block = 60.0
    with pytest.raises(BufferExhaustedError):
        lt.call(p.produce, TOPIC, b"b" * 988)
    assert sum(b.count for b in acc.queues[TopicPartition(TOPIC, 0)]) == 2


@pytest.mark.parametrize("impl", IMPLS)
def test_produce_after_close_raises_and_buffers_nothing(lt: LoopThread, impl: str) -> None:
    acc = make_acc(lt)
    p = wire(lt, impl, acc)
    p.produce(TOPIC, b"x")
    p.produce(TOPIC, b"x")
    acc.close_appends(ProducerClosedError("producer is closed"))
    with pytest.raises(ProducerClosedError):
        p.produce(TOPIC, b"y")
    assert acc.used == 26
    assert sum(b.count for b in acc.queues[TopicPartition(TOPIC, 0)]) == 2


@pytest.mark.parametrize("impl", IMPLS)
def test_a_failed_idempotent_producer_refuses_records(lt: LoopThread, impl: str) -> None:
    acc = make_acc(lt)
    p = wire(lt, impl, acc, acks="all")
    assert p._seq is not None
    p.produce(TOPIC, b"x")
    p.produce(TOPIC, b"x")
    p._seq.failed = OutOfOrderSequenceNumberError("fatal")
    with pytest.raises(OutOfOrderSequenceNumberError):
        p.produce(TOPIC, b"y")
    assert sum(b.count for b in acc.queues[TopicPartition(TOPIC, 0)]) == 2


@pytest.mark.parametrize("impl", IMPLS)
def test_several_threads_keep_their_order(lt: LoopThread, impl: str) -> None:
    acc = make_acc(lt, batch_size=8192)
    p = wire(lt, impl, acc)
    threads, per = 4, 3000
    futures: dict[int, list[RecordFuture]] = {}
    start = threading.Barrier(threads)

    def writer(t: int) -> None:
        start.wait(10)
        futures[t] = [p.produce(TOPIC, b"%d:%d" % (t, i)) for i in range(per)]

    run_threads(writer, threads)
    batches = drain_all(lt, acc)
    stored = [v or b"" for b in batches for v in _values(b)]
    assert sorted(stored) == sorted(b"%d:%d" % (t, i) for t in range(threads) for i in range(per))
    complete_in_order(lt, acc, batches)
    for t, fs in futures.items():
        offsets = [f.result(1).offset for f in fs]
        assert offsets == sorted(offsets)
        assert [stored[o] for o in offsets] == [b"%d:%d" % (t, i) for i in range(per)]


def _values(batch: Any) -> list[bytes | None]:
    [decoded] = decode_batches(batch.encoded or b"")
    return list(decoded.values())


def test_the_c_path_appends_without_calling_the_python_path(lt: LoopThread) -> None:
    acc = make_acc(lt, batch_size=1 << 20)
    p = wire(lt, "python", acc)
    calls: list[int] = []
    python_produce = p.produce

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return python_produce(*args, **kw)

    assert FastProduce is not None
    fast = FastProduce(
        counted,
        acc,
        p._tps,
        p._sticky_current or {},
        p._seq,
        p.max_request_size,
        RecordFuture,
        producer_module.ProducerBatch,
    )
    fs = [fast(TOPIC, b"r%d" % i) for i in range(1000)]
    # the batch's first record, and at most the first change of millisecond (the timestamps
    # become a column), go through Python; the rest is C
    assert 1 <= len(calls) <= 2
    assert [f._index for f in fs] == list(range(1000))
    assert fast.fallback is counted
    assert fast(TOPIC, b"k", key=b"k")._index == 1000 and len(calls) <= 3


# ------------------------------------------------------------ against a broker


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("acks", "buffer_memory"), [(1, 32 << 20), ("all", 32 << 20), (1, 24576)])
def test_blocking_send_of_unkeyed_records_from_several_threads(
    cluster: Any, monkeypatch: pytest.MonkeyPatch, impl: str, acks: int | str, buffer_memory: int
) -> None:
    # buffer_memory 24 KiB (three 8 KiB batches): the threads block for memory again and again,
    # the C path handing over to the Python path's FIFO wait while the others append
    _python_only(monkeypatch, impl)
    blocked: list[int] = []
    reserve_blocking = BufferMemory.reserve_blocking

    def counted(self: BufferMemory, nbytes: int) -> None:
        blocked.append(nbytes)
        reserve_blocking(self, nbytes)

    monkeypatch.setattr(BufferMemory, "reserve_blocking", counted)
    topic = f"fast-path-{impl}-{acks}-{buffer_memory}"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topic(topic, 3)
    threads, per = 3, 4000
    futures: dict[int, list[RecordFuture]] = {}
    with Producer(
        cluster.bootstrap, acks=acks, linger_ms=2, batch_size=8192, buffer_memory=buffer_memory
    ) as p:
        assert (type(p.send) is FastProduce) == (impl == "c")

        def writer(t: int) -> None:
            futures[t] = [p.send(topic, b"%d:%d" % (t, i)) for i in range(per)]

        run_threads(writer, threads)
        p.flush(60)
        metas = {t: [f.result(0) for f in fs] for t, fs in futures.items()}
    records = asyncio.run(read_all(cluster.bootstrap, topic, 3, threads * per))
    _check_read_back(records, metas, threads * per)
    assert bool(blocked) == (buffer_memory < 1 << 20)  # the small buffer made threads wait


def _python_only(monkeypatch: pytest.MonkeyPatch, impl: str) -> None:
    if impl == "python":
        monkeypatch.setattr(producer_module, "FastProduce", None)


def _check_read_back(records: list[Any], metas: dict[int, list[Any]], total: int) -> None:
    """Every record of thread ``t`` (value ``t:i``) read back once, where its metadata says,
    in the thread's order per partition."""
    assert len(records) == total  # none lost, none duplicated
    at = {(r.partition, r.offset): r.value for r in records}
    assert len(at) == total
    for t, ms in metas.items():
        assert all(isinstance(m, RecordMetadata) for m in ms)
        last: dict[int, int] = {}
        for i, m in enumerate(ms):
            assert at[(m.partition, m.offset)] == b"%d:%d" % (t, i)
            assert m.offset > last.get(m.partition, -1)  # the thread's order, per partition
            last[m.partition] = m.offset


_WITHOUT_C = """
from headwater.client import producer, record_future

assert producer.FastProduce is None
assert record_future.RecordFuture.__mro__[1] is record_future._PyRecordFutureBase
f = record_future.RecordFuture("outcome", 3)
assert (f._outcome, f._index) == ("outcome", 3)
print("ok")
"""


def test_without_the_c_module_the_python_path_is_used() -> None:
    assert run_without_c(["headwater.client._cproduce"], _WITHOUT_C).strip() == "ok"


_FAILED_REINIT = """
from tests.client.per_record_helpers import LoopThread, make_acc
from headwater.client import producer as pm
from headwater.client.record_future import RecordFuture

lt = LoopThread()
acc = make_acc(lt)
def python_produce(*a, **k):
    return "python"
f = pm.FastProduce(python_produce, acc, {}, {}, None, 1 << 20, RecordFuture, pm.ProducerBatch)
class NoSlots:
    __slots__ = ()
try:
    f.__init__(python_produce, acc, {}, {}, None, 1 << 20, RecordFuture, NoSlots)
except AttributeError:
    pass
else:
    raise AssertionError("re-init with a batch type without slots succeeded")
for call in (lambda: f("t", b"v"), lambda: f("t", b"v", key=b"k")):
    try:
        call()
    except RuntimeError as exc:
        assert "not initialised" in str(exc), exc
    else:
        raise AssertionError("a call after a failed re-init succeeded")
lt.stop()
print("ok")
"""


def test_a_failed_reinit_leaves_a_call_that_raises_not_one_that_crashes() -> None:
    # __init__ called again with bad arguments clears the cached fields: the object must then
    # refuse calls with an error (as before its first __init__), not run the C path on NULLs
    # (it crashed the interpreter: a segmentation fault). In a child process, so that a crash
    # fails this test instead of killing the test run.
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", _FAILED_REINIT], capture_output=True, text=True, timeout=60, cwd=root
    )
    assert out.returncode == 0, (out.returncode, out.stderr)
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("impl", IMPLS)
def test_partitions_added_while_threads_send(
    cluster: Any, monkeypatch: pytest.MonkeyPatch, impl: str
) -> None:
    # A metadata update (2 -> 4 partitions) while several threads send: the cached topic ->
    # partitions dict is cleared and refilled under the C path, which must fall back and then
    # append to the new partitions too; every record read back exactly once, in each thread's
    # order per partition.
    _python_only(monkeypatch, impl)
    topic = f"fast-path-grow-{impl}"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topic(topic, 2)
        threads, per = 3, 3000
        futures: dict[int, list[RecordFuture]] = {}
        halfway = threading.Barrier(threads + 1)
        with Producer(
            cluster.bootstrap, acks=1, linger_ms=2, batch_size=2048, metadata_max_age_ms=100
        ) as p:
            assert (type(p.send) is FastProduce) == (impl == "c")

            def writer(t: int) -> None:
                fs = [p.send(topic, b"%d:%d" % (t, i)) for i in range(per // 2)]
                halfway.wait(60)
                halfway.wait(60)  # the partitions were added
                fs += [p.send(topic, b"%d:%d" % (t, i)) for i in range(per // 2, per)]
                halfway.wait(60)
                halfway.wait(60)  # the producer's metadata has the new partitions
                fs += [p.send(topic, b"%d:%d" % (t, i)) for i in range(per, 2 * per)]
                futures[t] = fs

            ws = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
            for w in ws:
                w.start()
            halfway.wait(60)
            admin.create_partitions(topic, 4)
            halfway.wait(60)
            halfway.wait(60)
            view = p._p._metadata
            assert view is not None
            wait_for(  # a refresh as the sender's next maybe_refresh (metadata_max_age_ms) does
                lambda: len(p._lt.run(view.refresh()).topics[topic].partitions) == 4,
                timeout=30,
                what="the producer's metadata to show 4 partitions",
            )
            halfway.wait(60)
            for w in ws:
                w.join(120)
            assert not any(w.is_alive() for w in ws)
            p.flush(60)
            metas = {t: [f.result(0) for f in fs] for t, fs in futures.items()}
    records = asyncio.run(read_all(cluster.bootstrap, topic, 4, threads * 2 * per))
    _check_read_back(records, metas, threads * 2 * per)
    assert {r.partition for r in records} == {0, 1, 2, 3}  # the new partitions were used
