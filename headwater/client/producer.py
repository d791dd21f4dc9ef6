"""AsyncProducer: asyncio producer with batching, back-pressure, retries and futures.

Usage::

    async with AsyncProducer("127.0.0.1:9092", acks="all") as p:
        fut = await p.send("events", b"value", key=b"k")     # returns at once (buffered)
        meta = await fut                                       # RecordMetadata on ack
        for v in values:                                       # per record, no await:
            p.produce("events", v, callback=on_ack)            # a lazy RecordFuture each
        group = await p.send_many("events", values)            # the bulk path: one future
        await group                                            # GroupMetadata

``produce`` is the per-record call for tight loops (Kafka's ``send`` / confluent-kafka's
``produce``): it does not await, may be called from any thread, appends the record to the
accumulator under its lock and returns a :class:`headwater.client.record_future.RecordFuture`
that costs nothing until looked at (it resolves from its batch's result). Buffer memory short:
from another thread it blocks up to ``max_block_ms`` (then :class:`BufferExhaustedError`); on
the producer's own loop it cannot wait and raises :class:`BufferExhaustedError` at once (await
``send`` or ``flush`` then). The blocking facade's ``Producer.send`` is ``produce``. When the
optional C extension :mod:`headwater.client._cproduce` is built, ``produce`` is its
``FastProduce`` bound per producer at start: ``produce(topic, value)`` that appends to an open
batch without sealing it runs in C under the same lock; every other call is this method's.

``send`` does per record only: a partition choice, a size estimate and list appends.
``send_many`` hands the producer a whole list: sizes are computed with numpy, the list is
cut into batch-sized runs by slicing, keyed records are grouped by partition with one stable
argsort (:mod:`headwater.client.bulk`). Records are encoded a batch at a time when the sender
drains them (:mod:`headwater.client.accumulator`, :mod:`headwater.client.sender`).

Configuration, its validation and idempotence's defaults: :mod:`headwater.client.producer_config`.

Transactions: ``transactional_id=...`` (and ``transaction_timeout_ms``) adds
``init_transactions``, ``begin_transaction``, ``send_offsets_to_transaction``,
``commit_transaction``, ``abort_transaction`` (:mod:`headwater.client.transactions`).

Threading: an AsyncProducer lives on the loop that first uses it; ``produce`` may be called
from any thread, every other method only on that loop (or use
:class:`headwater.client.sync.Producer` from other threads).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from headwater import errors, timeouts
from headwater.client import idempotence, transactions
from headwater.client import partitioner as partitioners
from headwater.client.accumulator import RECORD_OVERHEAD, Accumulator, Header
from headwater.client.bulk import BulkAppender, check_bytes
from headwater.client.connection import ConnectionPool, parse_bootstrap
from headwater.client.errors import ProducerClosedError
from headwater.client.metadata import Metadata
from headwater.client.producer_batch import ProducerBatch
from headwater.client.producer_config import ProducerConfig
from headwater.client.producer_config import parse_acks as parse_acks  # re-exported
from headwater.client.producer_parts import build_parts
from headwater.client.record_future import RecordFuture
from headwater.client.security import ClientSecurity
from headwater.client.sender import Sender
from headwater.client.topic_partitions import TopicPartitions
from headwater.client.types import GroupMetadata, RecordMetadata, TopicPartition

try:  # the per-record call's common case in C (optional: absent without a C compiler)
    from headwater.client._cproduce import FastProduce
except ImportError:
    FastProduce = None  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

_time_ns = time.time_ns

Callback = Callable[[RecordMetadata | None, BaseException | None], None]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class AsyncProducer:
    """See the module docstring."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        acks: int | str = "all",
        batch_size: int | None = None,
        linger_ms: float = 5,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: float = 60_000,
        compression_type: str | None = "none",
        retries: int = 2_147_483_647,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120_000,
        max_in_flight: int = 5,
        request_timeout_ms: int = 30_000,
        max_request_size: int = 8 * 1024 * 1024,
        client_id: str = "headwater-python",
        partitioner: str | partitioners.Partitioner | None = None,
        metadata_max_age_ms: int = 300_000,
        enable_idempotence: bool | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        address_resolver: Callable[[str], str] | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self._address_resolver = address_resolver
        self._security = security  # TLS / credentials (headwater.client.security)
        self._bootstrap = parse_bootstrap(
            bootstrap if isinstance(bootstrap, str) else list(bootstrap)
        )
        c = self._cfg = ProducerConfig(
            acks=acks,
            batch_size=batch_size,
            linger_ms=linger_ms,
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            compression_type=compression_type,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            max_in_flight=max_in_flight,
            request_timeout_ms=request_timeout_ms,
            max_request_size=max_request_size,
            client_id=client_id,
            partitioner=partitioner,
            metadata_max_age_ms=metadata_max_age_ms,
            enable_idempotence=enable_idempotence,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
        )
        self.acks = c.acks
        self.transactional_id = c.transactional_id
        self.transaction_timeout_ms = c.transaction_timeout_ms
        self.enable_idempotence = c.enable_idempotence
        self._seq: idempotence.Sequencer | None = (
            idempotence.Sequencer(c.max_in_flight) if self.enable_idempotence else None
        )
        self._txn: transactions.TransactionManager | None = None
        self.max_block_ms = max_block_ms
        self.max_request_size = max_request_size
        self.partitioner = c.partitioner
        self._sticky = (
            self.partitioner
            if isinstance(self.partitioner, partitioners.StickyPartitioner)
            else None
        )
        #: the sticky partitioner's current partition per topic (produce()'s fast path)
        self._sticky_current = self._sticky.current if self._sticky is not None else None
        self._compression = c.compression
        self._pool: ConnectionPool | None = None
        self._metadata: Metadata | None = None
        self._acc: Accumulator | None = None
        self._sender: Sender | None = None
        self._bulk: BulkAppender | None = None
        self._sender_task: asyncio.Task[None] | None = None
        #: topic -> partitions (``topic_partitions.py``), read directly by send/produce
        self._tps: dict[str, list[TopicPartition]] = {}
        self._topics: TopicPartitions | None = None
        self._closed = False
        self._dead: BaseException | None = None
        self._start_lock: asyncio.Lock | None = None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Create the accumulator and sender, and load metadata (idempotent)."""
        if self._sender_task is not None:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._sender_task is not None:
                return
            self._check_open()
            parts = build_parts(
                self._cfg,
                self._bootstrap,
                self._tps,
                address_resolver=self._address_resolver,
                security=self._security,
                seq=self._seq,
                on_batch_sealed=self._on_batch_sealed,
                check_open=self._check_open,
            )
            self._pool, self._metadata, self._sender = parts.pool, parts.metadata, parts.sender
            self._topics, self._bulk, self._txn = parts.topics, parts.bulk, parts.txn
            # last: produce() from another thread starts once _acc is set
            self._acc = parts.acc
            self._bind_fast_produce()
            task = asyncio.get_running_loop().create_task(self._sender.run(), name="sender")
            task.add_done_callback(self._sender_done)
            self._sender_task = task

    def _bind_fast_produce(self) -> None:
        """Make ``self.produce`` the C module's FastProduce when it is built (its common case:
        ``produce(topic, value)``, sticky partitioner, a record appended to an open batch
        without sealing it, in C under the accumulator's lock; everything else falls back to
        the method below, unchanged). Not for a transactional producer, a custom partitioner
        or a subclass that overrides ``produce``."""
        if (
            FastProduce is None
            or self._sticky_current is None
            or self._txn is not None
            or type(self).produce is not AsyncProducer.produce
        ):
            return
        vars(self)["produce"] = FastProduce(
            AsyncProducer.produce.__get__(self),
            self._acc,
            self._tps,
            self._sticky_current,
            self._seq,
            self.max_request_size,
            RecordFuture,
            ProducerBatch,
        )

    def _sender_done(self, task: asyncio.Task[None]) -> None:
        exc = None if task.cancelled() else task.exception()
        if task.cancelled() or exc is not None:
            reason = ProducerClosedError(f"the producer's sender stopped: {exc or 'cancelled'}")
            if exc is not None:
                log.error("producer sender died", exc_info=exc)
                reason.__cause__ = exc
            self._dead = reason
            if self._acc is not None:
                self._acc.close_appends(reason)
                self._acc.fail_all(reason)

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._dead is not None:
            raise self._dead
        if self._closed:
            raise ProducerClosedError("producer is closed")
        if self._seq is not None:
            self._seq.check()
        if self._txn is not None:
            self._txn.check_can_send()

    async def flush(self, timeout_s: float | None = None) -> None:
        """Send everything buffered now and wait until each of those batches is done."""
        if self._acc is None or self._sender is None:
            return
        acc = self._acc
        pending = acc.incomplete_done()
        if not pending:
            return
        acc.flushing += 1
        self._sender.wake()
        try:
            await timeouts.wait_for(asyncio.gather(*pending), timeout_s)
        finally:
            acc.flushing -= 1

    async def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender, close connections. Idempotent."""
        if self._closed:
            return
        try:
            if self._sender_task is not None and self._dead is None:
                await self.flush(timeout_s)
        finally:
            self._closed = True
            if self._acc is not None:
                # appends racing with close (other threads' produce) fail from here on
                self._acc.close_appends(ProducerClosedError("producer is closed"))
            if self._sender is not None:
                await self._sender.close(timeout_s)
            if self._sender_task is not None and not self._sender_task.done():
                try:
                    await timeouts.wait_for(asyncio.shield(self._sender_task), 5)
                except TimeoutError:
                    self._sender_task.cancel()
                    await asyncio.wait([self._sender_task])
            if self._acc is not None and self._acc.incomplete:
                self._acc.fail_all(ProducerClosedError("producer closed before delivery"))
            if self._metadata is not None:
                await self._metadata.close()
            if self._pool is not None:
                await self._pool.close()

    # ------------------------------------------------------------ transactions

    def _txn_manager(self) -> transactions.TransactionManager:
        if self.transactional_id is None:
            raise errors.InvalidTxnStateError("this producer has no transactional_id")
        self._check_open_no_txn()
        assert self._txn is not None
        return self._txn

    def _check_open_no_txn(self) -> None:
        if self._dead is not None:
            raise self._dead
        if self._closed:
            raise ProducerClosedError("producer is closed")

    async def init_transactions(self) -> None:
        """Get the producer id/epoch of ``transactional_id`` (fencing older incarnations and
        aborting their open transaction). Call once, before the first transaction."""
        await self.start()
        await self._txn_manager().init()

    def begin_transaction(self) -> None:
        self._txn_manager().begin()

    async def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any) -> None:
        """Commit consumer offsets (``{TopicPartition: next offset}``) as part of the
        transaction; ``group_metadata`` is a group id or the consumer (its group id,
        generation and member id are sent)."""
        await self._txn_manager().send_offsets(offsets, group_metadata)

    async def commit_transaction(self) -> None:
        """Flush, then commit. If a send of the transaction failed, raises
        :class:`InvalidTxnStateError` (the cause is the failure): call abort_transaction().
        A retriable error (e.g. :class:`RequestTimedOutError`) leaves the outcome unknown: call
        commit_transaction() again (abort_transaction() then raises InvalidTxnStateError)."""
        await self._txn_manager().commit(self.flush)

    async def abort_transaction(self) -> None:
        """Drop records not yet sent (their futures fail), await in-flight ones, abort."""
        await self._txn_manager().abort()

    # ------------------------------------------------------------ partitions

    def _on_batch_sealed(self, topic: str, partition: int) -> None:
        if self._sticky is not None and self._metadata is not None:
            n = self._metadata.view.partition_count(topic)
            if n:
                self._sticky.on_batch_sealed(topic, partition, n)

    # ------------------------------------------------------------ sending

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[Header] | None = None,
        timestamp: int | None = None,
        callback: Callback | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Buffer one record; returns a future resolved with its RecordMetadata on ack.

        Awaits only for metadata of a new topic or for buffer memory (back-pressure).
        ``callback(metadata, exception)`` runs on the loop when the record is done.
        """
        if self._sender_task is None:
            await self.start()
        self._check_open()
        tps = self._tps.get(topic)
        if tps is None:
            assert self._topics is not None
            tps = await self._topics.wait(topic)
        if type(value) is not bytes:
            check_bytes("value", value)
        if key is not None and type(key) is not bytes:
            check_bytes("key", key)
        n = len(tps)
        if partition is None:
            partition = self.partitioner(key, n, topic)
        if not 0 <= partition < n:
            raise errors.UnknownTopicOrPartitionError(
                f"partition {partition} of {topic!r} does not exist ({n} partitions)"
            )
        size = RECORD_OVERHEAD + (len(value) if value is not None else 0)
        if key is not None:
            size += len(key)
        if headers:
            size += sum(len(k) + (len(v) if v is not None else 0) + 12 for k, v in headers)
        if size > self.max_request_size:
            raise errors.MessageTooLargeError(
                f"record of ~{size} bytes exceeds max_request_size={self.max_request_size}"
            )
        acc = self._acc
        assert acc is not None
        if not acc.try_reserve(size):
            await acc.reserve(size)
            self._check_open()
        fut: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        if callback is not None:
            fut.add_done_callback(_callback_adapter(callback))
        sealed = acc.append(
            tps[partition],
            value,
            key,
            headers,
            _now_ms() if timestamp is None else timestamp,
            size,
            fut,
        )
        if sealed:
            # A full batch is ready: give the sender one turn of the loop, so a caller that
            # sends in a tight loop does not starve it until buffer memory runs out.
            await asyncio.sleep(0)
        return fut

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[Header] | None = None,
        timestamp: int | None = None,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """Buffer one record without awaiting; its lazy :class:`RecordFuture`.

        Callable from any thread once the producer is started (see the module docstring for
        back-pressure). ``callback(metadata, exception)`` runs on the producer's loop when the
        record's batch is done, in record order within a partition. The topic's metadata must
        be known: from another thread this waits for it (``max_block_ms``); on the loop a
        topic not yet seen raises :class:`BufferExhaustedError` (``await partitions_for()``
        first).
        """
        acc = self._acc
        if acc is None:
            raise ProducerClosedError("producer not started: await start() first")
        # A closed or dead producer refuses the record in append_record (close_appends set
        # the accumulator's ``closed`` with the same error), so the common case checks only
        # what the accumulator cannot know.
        seq = self._seq
        if seq is not None:
            if seq.failed is not None:
                raise seq.failed
            if self._txn is not None:
                self._txn.check_can_send()
        tps = self._tps.get(topic)
        if tps is None:
            if self._dead is not None or self._closed:
                self._check_open()
            assert self._topics is not None
            tps = self._topics.wait_from_any_thread(topic)
        if type(value) is bytes:
            size = RECORD_OVERHEAD + len(value)
        else:
            check_bytes("value", value)
            size = RECORD_OVERHEAD + (len(value) if value is not None else 0)
        n = len(tps)
        if key is None and partition is None and not headers:
            # the common case: a null key placed by the sticky partitioner
            sticky = self._sticky_current
            if sticky is not None:
                partition = sticky.get(topic)
                if partition is None or partition >= n:
                    partition = self.partitioner(None, n, topic)
            else:
                partition = self._custom_partition(None, n, topic)
        else:
            if key is not None:
                if type(key) is not bytes:
                    check_bytes("key", key)
                size += len(key)
            if headers:
                size += sum(len(k) + (len(v) if v is not None else 0) + 12 for k, v in headers)
            if partition is None:
                partition = self._custom_partition(key, n, topic)
            elif not 0 <= partition < n:
                raise self._no_partition(topic, partition, n)
        if size > self.max_request_size:
            raise errors.MessageTooLargeError(
                f"record of ~{size} bytes exceeds max_request_size={self.max_request_size}"
            )
        return acc.append_record(
            tps[partition],
            value,
            key,
            headers,
            _time_ns() // 1_000_000 if timestamp is None else timestamp,
            size,
            callback,
        )

    def _custom_partition(self, key: bytes | None, n: int, topic: str) -> int:
        """The partitioner's choice, checked (a custom partitioner may return anything)."""
        partition = self.partitioner(key, n, topic)
        if not 0 <= partition < n:
            raise self._no_partition(topic, partition, n)
        return partition

    @staticmethod
    def _no_partition(topic: str, partition: int, n: int) -> Exception:
        return errors.UnknownTopicOrPartitionError(
            f"partition {partition} of {topic!r} does not exist ({n} partitions)"
        )

    async def partitions_for(self, topic: str) -> list[TopicPartition]:
        """The topic's partitions (waiting up to ``max_block_ms`` for its metadata)."""
        if self._sender_task is None:
            await self.start()
        assert self._topics is not None
        return list(await self._topics.wait(topic))

    async def send_and_wait(self, topic: str, value: bytes | None, **kw: Any) -> RecordMetadata:
        return await (await self.send(topic, value, **kw))

    async def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[Sequence[Header]] | None = None,
        timestamp: int | None = None,
    ) -> asyncio.Future[GroupMetadata]:
        """Buffer a list of records (the bulk path); one future for the whole group.

        ``keys``/``headers`` (optional) are parallel to ``values``. All records get the same
        timestamp (``timestamp`` or now). Returns once every record is buffered (awaiting
        buffer memory as needed); the future resolves to a :class:`GroupMetadata` once every
        batch holding part of the group is acknowledged, or fails with the first error.
        """
        if self._sender_task is None:
            await self.start()
        self._check_open()
        tps = self._tps.get(topic)
        if tps is None:
            assert self._topics is not None
            tps = await self._topics.wait(topic)
        assert self._bulk is not None
        ts = _now_ms() if timestamp is None else timestamp
        return await self._bulk.add(topic, tps, values, keys, headers, ts, partition)


def _callback_adapter(cb: Callback) -> Callable[[asyncio.Future[RecordMetadata]], None]:
    def done(fut: asyncio.Future[RecordMetadata]) -> None:
        if fut.cancelled():
            cb(None, asyncio.CancelledError())
        elif fut.exception() is not None:
            cb(None, fut.exception())
        else:
            cb(fut.result(), None)

    return done
