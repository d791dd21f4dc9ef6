"""The producer's record accumulator: per-partition queues of batches, readiness, completion.

Ownership: one :class:`Accumulator` belongs to one producer and its event loop. Its state is
guarded by ``lock`` (a re-entrant lock), so records may also be appended from other threads
(:meth:`Accumulator.append_record`, the per-record path of ``AsyncProducer.produce`` and the
blocking ``Producer.send``): the caller's thread appends under the lock and the loop is woken
(``call_soon_threadsafe``) only when a batch is sealed or a new batch starts its linger, never
per record. ``send``/``send_many`` append on the loop; the sender drains, then reports each
batch's fate with :meth:`Accumulator.complete` or :meth:`Accumulator.fail` (on the loop).

Per partition there is a FIFO deque of :class:`ProducerBatch` (its columns and waiters:
:mod:`headwater.client.producer_batch`); only the last one may be open (accepting records).

A batch is *ready* to send when it is sealed (full: its estimated size reached
``batch_size``), when it is older than ``linger_ms``, when a ``flush`` is in progress, or when
senders are blocked waiting for buffer memory. The Accumulator is the producer's
:class:`headwater.client.buffer_memory.BufferMemory` (``reserve`` blocks, FIFO, while the
records not yet completed would exceed ``buffer_memory``).

Records appended with :meth:`append_record` get a
:class:`headwater.client.record_future.RecordFuture` (the batch's outcome and the record's
index: nothing per record until someone looks); ``send`` and ``send_many`` add a future or a
:class:`Group` to the batch's waiters.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from headwater.batch import Compression
from headwater.client.buffer_memory import BufferMemory
from headwater.client.errors import BufferExhaustedError, DeliveryTimeoutError
from headwater.client.producer_batch import (
    BATCH_OVERHEAD,
    RECORD_OVERHEAD,
    Group,
    Header,
    ProducerBatch,
)
from headwater.client.record_future import RecordCallback, RecordFuture
from headwater.client.types import PartitionRange, RecordMetadata, TopicPartition

__all__ = [
    "BATCH_OVERHEAD",
    "RECORD_OVERHEAD",
    "Accumulator",
    "Group",
    "Header",
    "ProducerBatch",
    "Producing",
]


class Producing(Protocol):
    """What :meth:`Accumulator.drain` needs from an idempotent producer (the sender):
    :class:`headwater.client.idempotence.Producing`."""

    @property
    def fields(self) -> tuple[int, int, bool]:
        """(producer_id, producer_epoch, transactional) for batch headers."""
        ...

    def may_send(self, tp: TopicPartition) -> bool: ...

    def quota(self, tp: TopicPartition, head: ProducerBatch) -> int: ...

    def assign(self, batch: ProducerBatch) -> int: ...

    def sending(self, batch: ProducerBatch) -> None: ...

    def expired_sequenced(self, batch: ProducerBatch, err: BaseException) -> None: ...


class Accumulator(BufferMemory):
    """Per-partition batches, buffer memory and readiness (see module docstring)."""

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: float,
        buffer_memory: int,
        max_block_ms: float,
        delivery_timeout_ms: float,
        compression: Compression,
        on_batch_sealed: Callable[[str, int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(buffer_memory, max_block_ms, on_blocked=self._wake)
        self.batch_size = batch_size
        #: topic -> the batch limit its ``max.message.bytes`` sets, for topics whose limit is
        #: below ``batch_size`` (:meth:`limit_batches`)
        self._topic_limits: dict[str, int] = {}
        self.linger = linger_ms / 1000
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.compression = compression
        self._on_sealed = on_batch_sealed
        self.clock = clock
        self.flushing = 0
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        #: called whenever something may have become ready (set by the sender)
        self.wakeup: Callable[[], None] = lambda: None
        #: told of every failed batch (the transaction manager's abortable-error hook)
        self.on_fail: Callable[[ProducerBatch, BaseException], None] | None = None
        self._wake_pending = False
        #: set by :meth:`close_appends`: every later append raises it
        self.closed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        with contextlib.suppress(RuntimeError):  # else bound by the first open_batch
            self.bind_loop(asyncio.get_running_loop())

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop (and its thread) that drains this accumulator."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def on_loop_thread(self) -> bool:
        return self._loop is None or threading.get_ident() == self._loop_thread

    def _wake(self) -> None:
        """Call ``wakeup`` on the loop (directly when already there)."""
        if self._loop is None or threading.get_ident() == self._loop_thread:
            self.wakeup()
        else:
            self._loop.call_soon_threadsafe(self._call_wakeup)

    def _call_wakeup(self) -> None:
        self.wakeup()

    # ------------------------------------------------------------ appending

    def open_batch(self, tp: TopicPartition) -> ProducerBatch:
        """The batch accepting records for ``tp`` (created if needed). Under ``lock``."""
        dq = self.queues.get(tp)
        if dq is None:
            dq = self.queues[tp] = deque()
        if dq and not dq[-1].sealed:
            return dq[-1]
        loop = self._loop
        if loop is None:
            loop = asyncio.get_running_loop()
            self.bind_loop(loop)
        limit = self._topic_limits.get(tp.topic, self.batch_size)
        batch = ProducerBatch(tp, self.clock(), loop.create_future(), limit)
        dq.append(batch)
        self.incomplete.add(batch)
        if not self._wake_pending:
            # a new batch has a linger deadline the sender must learn about
            self._wake_pending = True
            if threading.get_ident() == self._loop_thread:
                loop.call_soon(self._deferred_wake)
            else:
                loop.call_soon_threadsafe(self._deferred_wake)
        return batch

    def _deferred_wake(self) -> None:
        self._wake_pending = False
        self.wakeup()

    def limit_batches(self, topic: str, max_message_bytes: int | None) -> None:
        """Batches of ``topic`` opened from now on are sealed within ``max_message_bytes``
        (the topic's ``max.message.bytes`` as the metadata shows it; None: not set, then
        ``batch_size`` alone). The broker refuses a larger batch whole (MESSAGE_TOO_LARGE)
        and this producer does not split a refused batch (Kafka's KIP-126 does), so a topic
        limited below ``batch_size`` must not be sent a batch that large.

        The bound applies to the size estimate (``nbytes``: 128 bytes per batch and 12 per
        record besides keys, values and headers), with 1/16 of the limit kept free. The
        encoded batch (headwater/batch/columns.py: fixed-width columns, ~8 bytes per record
        besides its key and value, ~12 with keys) is smaller except by under a byte per
        record with keys and headers and a few dozen bytes of padding, which the 1/16
        covers."""
        with self.lock:
            limit = None if max_message_bytes is None else max_message_bytes * 15 // 16
            if limit is None or limit >= self.batch_size:
                self._topic_limits.pop(topic, None)
            else:
                self._topic_limits[topic] = max(limit, BATCH_OVERHEAD + RECORD_OVERHEAD)

    def room(self, tp: TopicPartition) -> int:
        """Bytes the open batch of ``tp`` can still take (its whole limit if none is
        open)."""
        with self.lock:
            dq = self.queues.get(tp)
            if dq and not dq[-1].sealed:
                return dq[-1].limit - dq[-1].nbytes
            return self._topic_limits.get(tp.topic, self.batch_size) - BATCH_OVERHEAD

    def has_open_records(self, tp: TopicPartition) -> bool:
        with self.lock:
            dq = self.queues.get(tp)
            return bool(dq) and not dq[-1].sealed and dq[-1].count > 0  # type: ignore[index]

    def seal(self, batch: ProducerBatch) -> None:
        """Close ``batch`` to appends and wake the sender. Under ``lock``."""
        if batch.sealed:
            return
        batch.sealed = True
        if self._on_sealed is not None:
            self._on_sealed(batch.tp.topic, batch.tp.partition)
        self._wake()

    def seal_open(self, tp: TopicPartition) -> None:
        with self.lock:
            dq = self.queues.get(tp)
            if dq and not dq[-1].sealed and dq[-1].count:
                self.seal(dq[-1])

    def incomplete_done(self) -> list[asyncio.Future[None]]:
        """The ``done`` futures of every batch not yet completed (a snapshot)."""
        with self.lock:
            return [b.done for b in self.incomplete]

    def append(
        self,
        tp: TopicPartition,
        value: Any,
        key: bytes | None,
        headers: Sequence[Header] | None,
        ts: int,
        nbytes: int,
        target: Any,
    ) -> bool:
        """Add one record (its ``nbytes`` already reserved); True when a batch was sealed."""
        with self.lock:
            sealed = False
            batch = self.open_batch(tp)
            if batch.count and batch.nbytes + nbytes > batch.limit:
                self.seal(batch)
                sealed = True
                batch = self.open_batch(tp)
            batch.append(value, key, headers, ts, nbytes, target)
            if batch.nbytes + nbytes > batch.limit:
                self.seal(batch)  # the next record of this size would not fit
                sealed = True
            return sealed

    def append_record(
        self,
        tp: TopicPartition,
        value: Any,
        key: bytes | None,
        headers: Sequence[Header] | None,
        ts: int,
        nbytes: int,
        callback: RecordCallback | None,
    ) -> RecordFuture:
        """Reserve ``nbytes`` and add one record, from any thread; its lazy future.

        Buffer memory short: a thread other than the loop's waits up to ``max_block_ms``
        (:meth:`reserve_blocking`); on the loop (which cannot wait here)
        :class:`BufferExhaustedError` is raised at once. A thread other than the loop's that
        sealed a batch yields the GIL once before returning (the sender starts at once).
        """
        # The C module headwater/client/_cproduce.c (append_locked) does the common case of
        # this method (open batch, no seal, memory free, uniform or columnar timestamps) on the
        # same fields under the same lock: keep the two in step
        # (tests/client/test_produce_fast_path.py compares the batches both build).
        # The per-record hot path of every blocking send(): attribute reads are kept to
        # what the common case (an open batch with room, no key/headers/callback) needs, and
        # the lock is taken with acquire/release rather than ``with`` (the with statement's
        # special-method lookups cost about as much again as the lock itself: ~0.15 µs of the
        # caller's ~1.7 µs per record, measured).
        sealed = False
        lock = self.lock
        lock.acquire()
        try:
            if self.closed is not None:
                raise self.closed
            used = self.used + nbytes
            if used > self.buffer_memory or self._mem_waiters:
                self._reserve_now(nbytes)
            else:
                self.used = used
            dq = self.queues.get(tp)
            batch = dq[-1] if dq else None
            if batch is None or batch.sealed:
                batch = self.open_batch(tp)
            size = batch.nbytes + nbytes
            if size > batch.limit and batch.count:
                self.seal(batch)
                sealed = True
                batch = self.open_batch(tp)
                size = batch.nbytes + nbytes
            i = batch.count
            if batch.timestamps is not None:
                batch.timestamps.append(ts)
            elif ts != batch.ts_uniform:
                batch._add_timestamps(ts, 1)
            batch.values.append(value)
            if key is not None or batch.keys is not None:
                if batch.keys is None:
                    batch.keys = [None] * i
                batch.keys.append(key)
            if headers or batch.headers is not None:
                if batch.headers is None:
                    batch.headers = [()] * i
                batch.headers.append(headers or ())
            batch.count = i + 1
            batch.nbytes = size
            outcome = batch.outcome
            if callback is not None:
                if outcome.record_callbacks is None:
                    outcome.record_callbacks = []
                outcome.record_callbacks.append((i, callback))
            if size + nbytes > batch.limit:
                self.seal(batch)  # the next record of this size would not fit
                sealed = True
        finally:
            lock.release()
        if sealed and threading.get_ident() != self._loop_thread:
            # Hand the GIL over now: the loop thread, woken by the seal, would otherwise wait
            # up to the interpreter's switch interval (5 ms, several 1 MiB batches of 1 KiB
            # records) while this thread keeps appending, and the sealed batch's request
            # would start that much later (docs/benchmarks.md, issue 17).
            time.sleep(0)
        return RecordFuture(outcome, i)

    def _reserve_now(self, nbytes: int) -> None:
        """The slow path of :meth:`append_record` (under ``lock``, which it releases while
        blocked)."""
        if self.closed is not None:
            raise self.closed
        if self._loop is None or threading.get_ident() == self._loop_thread:
            raise BufferExhaustedError(
                f"no buffer memory for {nbytes} bytes now "
                f"({self.used}/{self.buffer_memory} in use): await send() or flush()"
            )
        self.lock.release()
        try:
            self.reserve_blocking(nbytes)
        finally:
            self.lock.acquire()
        if self.closed is not None:
            self.release(nbytes)
            raise self.closed

    def append_many(
        self,
        tp: TopicPartition,
        values: Sequence[Any],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Sequence[Header]] | None,
        ts: int,
        nbytes: int,
        group: Group,
    ) -> None:
        """Add a run of records that the caller sized to fit :meth:`room` (already reserved).
        Other appends may have filled the open batch since the caller read its room (a
        ``send()`` from another thread, another ``send_many`` that waited for memory): the
        run then starts a batch of its own rather than push that one past its limit."""
        with self.lock:
            batch = self.open_batch(tp)
            if batch.count and batch.nbytes + nbytes > batch.limit:
                self.seal(batch)
                batch = self.open_batch(tp)
            group.add_piece()
            batch.append_many(values, keys, headers, ts, nbytes, group)
            if batch.nbytes >= batch.limit - RECORD_OVERHEAD:
                self.seal(batch)

    # ------------------------------------------------------------ draining

    def drain(
        self,
        leader_of: Callable[[TopicPartition], int],
        can_send: Callable[[int], bool],
        muted: set[TopicPartition],
        max_request_size: int,
        producer: Producing | None = None,
    ) -> tuple[dict[int, list[ProducerBatch]], float | None, bool]:
        """Take ready batches grouped by leader.

        Returns (batches by leader id, the clock time of the next linger/backoff deadline or
        None, whether some partition with data has no known leader). Expired batches
        (``delivery_timeout_ms``) are failed here. Batches are encoded on the way out, after
        ``lock`` is released; ``max_request_size`` counts a fresh batch by its estimated size.

        ``producer`` (idempotent producers): a partition is taken only when
        ``producer.may_send(tp)`` (e.g. it was added to the transaction), at most
        ``producer.quota(tp, head)`` batches of it per drain (a retry alone, once every
        earlier batch is resolved; fresh batches while its window has room), never resent
        and fresh batches together; each newly drained batch gets its sequence from
        ``producer.assign(batch)``, every taken one is reported to ``producer.sending`` and
        is encoded with ``producer.fields`` (a batch whose sequence moved, ``restamp``, gets
        its new ``base_sequence`` written into its bytes).
        An expired batch that already has a sequence is reported to
        ``producer.expired_sequenced`` (its outcome is unknown).
        """
        with self.lock:
            out, next_at, unknown = self._drain(
                leader_of, can_send, muted, max_request_size, producer
            )
        # encoded outside the lock (appending threads need not wait): a drained batch is
        # sealed and out of its queue, only this loop touches it
        fields = producer.fields if producer is not None else None
        for taken in out.values():
            for b in taken:
                b.encode(self.compression, fields)
        return out, next_at, unknown

    def _drain(
        self,
        leader_of: Callable[[TopicPartition], int],
        can_send: Callable[[int], bool],
        muted: set[TopicPartition],
        max_request_size: int,
        producer: Producing | None,
    ) -> tuple[dict[int, list[ProducerBatch]], float | None, bool]:
        now = self.clock()
        force = self.flushing > 0 or bool(self._mem_waiters)
        out: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        next_at: float | None = None
        unknown = False
        empty: list[TopicPartition] = []
        for tp, dq in self.queues.items():
            while dq and now - dq[0].created >= self.delivery_timeout:
                b = dq.popleft()
                err = DeliveryTimeoutError(
                    f"batch for {tp.topic}[{tp.partition}] not acknowledged within "
                    f"{self.delivery_timeout * 1000:.0f} ms ({b.attempts} attempts)"
                )
                if producer is not None and b.base_seq >= 0:
                    producer.expired_sequenced(b, err)
                self.fail(b, err)
            if not dq:
                empty.append(tp)
                continue
            head = dq[0]
            deadline = head.created + self.delivery_timeout
            next_at = deadline if next_at is None else min(next_at, deadline)
            if tp in muted:
                continue
            leader = leader_of(tp)
            if leader < 0:
                unknown = True
                continue
            if head.backing_off(now, leader):
                next_at = min(next_at, head.retry_at)
                continue
            if not (head.sealed or force or now - head.created >= self.linger or len(dq) > 1):
                next_at = min(next_at, head.created + self.linger)
                continue
            if not can_send(leader):
                continue
            if producer is not None and not producer.may_send(tp):
                continue
            limit = producer.quota(tp, head) if producer is not None else 1 << 30
            if limit <= 0:
                continue
            taken = out.setdefault(leader, [])
            size = sizes.get(leader, 0)
            n = 0
            resend = head.base_seq >= 0  # the head was sent before (a retry)
            while dq and n < limit and (not taken or size + dq[0].nbytes <= max_request_size):
                b = dq[0]
                if b.backing_off(now, leader):
                    break
                if producer is not None and (b.base_seq >= 0) != resend:
                    # Never mix resent and never-sent batches of a partition in one request:
                    # the broker answers one base offset per partition, which is the original
                    # one only when every batch of the entry is a duplicate (or none is).
                    break
                if not (b.sealed or force or now - b.created >= self.linger):
                    break  # the open tail keeps filling until it is due
                if not b.sealed:
                    self.seal(b)
                if producer is not None:
                    if b.base_seq < 0:
                        producer.assign(b)
                    producer.sending(b)
                dq.popleft()
                taken.append(b)
                n += 1
                # the size once encoded (a retry), else the estimate (encoded after the lock)
                size += b.encoded_size if b.pieces is not None else b.nbytes
            sizes[leader] = size
        for tp in empty:
            if not self.queues[tp]:
                del self.queues[tp]
        return {k: v for k, v in out.items() if v}, next_at, unknown

    def reenqueue(self, batch: ProducerBatch, retry_at: float, leader: int = -1) -> None:
        """Put a failed batch back at the head of its partition, to retry after ``retry_at``
        (or as soon as another broker than ``leader``, the one that failed, leads it).

        A batch with a sequence goes before every queued batch with a later sequence or none,
        so retries of an idempotent producer always resend in sequence order.
        """
        with self.lock:
            batch.attempts += 1
            batch.retry_at = retry_at
            batch.retry_leader = leader
            dq = self.queues.get(batch.tp)
            if dq is None:
                dq = self.queues[batch.tp] = deque()
            if batch.base_seq < 0:
                dq.appendleft(batch)
            else:
                i = 0
                while i < len(dq) and 0 <= dq[i].base_seq < batch.base_seq:
                    i += 1
                dq.insert(i, batch)
        self._wake()

    def expired(self, batch: ProducerBatch) -> bool:
        return self.clock() - batch.created >= self.delivery_timeout

    # ------------------------------------------------------------ completion

    def complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int = -1) -> None:
        """Resolve every waiter of ``batch`` (``base_offset`` -1 for acks=0). On the loop."""
        topic, partition = batch.tp
        waiters = batch.waiters
        with self.lock:
            self._finish(batch)
        for start, count, target in waiters:
            off = base_offset + start if base_offset >= 0 else -1
            if isinstance(target, Group):
                target.piece_done(PartitionRange(partition, off, count))
            elif not target.done():
                ts = log_append_time if log_append_time >= 0 else batch.timestamp_at(start)
                target.set_result(RecordMetadata(topic, partition, off, ts))
        batch.outcome.resolve(base_offset, log_append_time)

    def fail(self, batch: ProducerBatch, exc: BaseException) -> None:
        """Fail every waiter of ``batch`` with ``exc``. On the loop."""
        waiters = batch.waiters
        with self.lock:
            if self.on_fail is not None and batch in self.incomplete:
                self.on_fail(batch, exc)
            self._finish(batch)
        for _start, _count, target in waiters:
            if isinstance(target, Group):
                target.fail(exc)
            elif not target.done():
                target.set_exception(exc)
        batch.outcome.reject(exc)

    def _finish(self, batch: ProducerBatch) -> None:
        # under self.lock
        if batch in self.incomplete:
            self.incomplete.discard(batch)
            batch.waiters = []
            self.release(batch.reserved)
            if not batch.done.done():
                batch.done.set_result(None)

    def fail_queued(self, exc: BaseException) -> None:
        """Fail every batch waiting in a queue (not the ones in flight). On the loop."""
        with self.lock:
            batches = [b for dq in self.queues.values() for b in dq]
            for dq in self.queues.values():
                dq.clear()
        for batch in batches:
            self.fail(batch, exc)

    def close_appends(self, exc: BaseException) -> None:
        """Refuse every later append with ``exc`` (the producer closed or died), so a record
        appended by another thread cannot land after the final :meth:`fail_all`."""
        with self.lock:
            if self.closed is None:
                self.closed = exc

    def fail_all(self, exc: BaseException) -> None:
        """Fail every batch not yet completed (queued or in flight). On the loop."""
        with self.lock:
            for dq in self.queues.values():
                dq.clear()
            self.queues.clear()
            batches = list(self.incomplete)
            waiters = self._take_mem_waiters()
        for batch in batches:
            self.fail(batch, exc)
        for _need, fut in waiters:
            if not fut.done():
                fut.set_exception(exc)
