"""Blocking facades: Producer, Consumer, AdminClient.

Each facade owns a private event loop running in a daemon thread and the async client that
lives on it; calls are shipped to that loop with ``run_coroutine_threadsafe`` and waited
for — except ``Producer.send``, the per-record call, which is
:meth:`AsyncProducer.produce` run in the caller's thread: the record is appended to the
accumulator under its lock (no hop to the loop per record; the loop is woken when a batch
fills or starts its linger) and a lazy :class:`~headwater.client.record_future.RecordFuture`
is returned (``result(timeout)``, ``add_done_callback``; it does not wait for the ack
itself). Buffer memory short, ``send`` blocks up to ``max_block_ms``, then raises
:class:`BufferExhaustedError`. Facades are safe to call from several threads. ``close()``
stops the loop and joins the thread; facades are context managers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from headwater.client.admin import (
    AsyncAdminClient,
    ClusterDescription,
    ElectionResult,
    NewTopic,
    Reassignment,
    TopicDescription,
)
from headwater.client.admin_configs import ConfigEntry, ConfigResource
from headwater.client.admin_groups import GroupDescription, ListedGroup
from headwater.client.types import (
    ConsumerRecord,
    GroupMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)

if TYPE_CHECKING:  # imported where used: a process that only administers skips them
    from headwater.client.accumulator import Header
    from headwater.client.fetched import FetchedBatch
    from headwater.client.group import RebalanceListener
    from headwater.client.producer import AsyncProducer, Callback
    from headwater.client.record_future import RecordFuture

T = TypeVar("T")


class _LoopThread:
    """A private event loop in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def _chain(src: asyncio.Future[T], dst: concurrent.futures.Future[T]) -> None:
    if src.cancelled():
        dst.cancel()
    elif src.exception() is not None:
        dst.set_exception(src.exception())
    else:
        dst.set_result(src.result())


class Producer:
    """Blocking facade over :class:`AsyncProducer` (same arguments)."""

    def __init__(self, bootstrap: str | Sequence[str], **config: Any) -> None:
        self._lt = _LoopThread("headwater-producer")
        self._buffering: set[asyncio.Task[Any]] = set()  # sends not yet buffered (loop-owned)
        self._tail: asyncio.Task[Any] | None = None  # the last send submitted (loop-owned)
        try:
            self._p = self._lt.run(self._make(bootstrap, config))
        except BaseException:
            self._lt.stop()
            raise
        # The per-record call is the async producer's produce() itself, bound here: a call
        # through the method below would add a Python frame (~0.2 µs of the caller's ~1.5 µs
        # per record, measured: docs/benchmarks.md, issue 17). Same arguments, same contract.
        vars(self)["send"] = self._p.produce

    @staticmethod
    async def _make(bootstrap: str | Sequence[str], config: dict[str, Any]) -> AsyncProducer:
        from headwater.client.producer import AsyncProducer

        p = AsyncProducer(bootstrap, **config)
        await p.start()
        return p

    async def _send(
        self, cf: concurrent.futures.Future[Any], coro: Coroutine[Any, Any, asyncio.Future[Any]]
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._buffering.add(task)
        # Sends are buffered in call order: each waits for the previous one to be buffered
        # (AsyncProducer.send may wait — metadata, buffer space — and two waiting tasks are not
        # guaranteed to resume in submission order).
        prev, self._tail = self._tail, task
        try:
            if prev is not None and not prev.done():
                try:
                    await asyncio.wait([prev])
                except BaseException:
                    coro.close()  # cancelled before it started: never awaited
                    raise
            fut = await coro
        except BaseException as exc:
            cf.set_exception(exc)
            return
        finally:
            self._buffering.discard(task)
        fut.add_done_callback(lambda f: _chain(f, cf))

    async def _after_sends(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` once every earlier ``send`` has been buffered. ``send`` does not wait
        for that (it may wait for metadata on the loop): without this a commit_transaction
        called right after it could flush and commit before the record joined the
        transaction (seen: the sync facade's commit returned, the send's future never
        resolved). Tasks start in submission order (one loop), so every earlier send has
        registered in ``_buffering`` by the time this runs."""
        pending = list(self._buffering)
        if pending:
            await asyncio.wait(pending)
        return await coro

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[Header] | None = None,
        timestamp: int | None = None,
        callback: Callback | None = None,
    ) -> RecordFuture:
        """Buffer a record in the calling thread; its future resolves with its RecordMetadata
        on ack (``callback(metadata, exception)`` runs on the producer's loop thread). Blocks
        up to ``max_block_ms`` for buffer memory (or a new topic's metadata), then
        :class:`BufferExhaustedError`."""
        return self._p.produce(topic, value, key, partition, headers, timestamp, callback)

    def send_many(
        self,
        topic: str,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[Sequence[Header]] | None = None,
        timestamp: int | None = None,
    ) -> concurrent.futures.Future[GroupMetadata]:
        """Buffer a list of records (blocks while buffer memory is short); one future."""
        cf: concurrent.futures.Future[GroupMetadata] = concurrent.futures.Future()
        coro = self._p.send_many(
            topic, values, keys, partition=partition, headers=headers, timestamp=timestamp
        )
        # after every earlier send() is buffered: the group lands behind them, in call order
        self._lt.run(self._after_sends(self._send(cf, coro)))
        return cf

    def flush(self, timeout: float | None = None) -> None:
        self._lt.run(self._after_sends(self._p.flush(timeout)))

    # transactions (see AsyncProducer); each runs on the producer's loop, in call order

    def init_transactions(self, timeout: float | None = None) -> None:
        self._lt.run(self._p.init_transactions(), timeout)

    async def _begin(self) -> None:
        self._p.begin_transaction()

    def begin_transaction(self) -> None:
        self._lt.run(self._begin())

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, Any], group_metadata: Any
    ) -> None:
        """``group_metadata``: a group id, or the (sync or async) consumer of the group."""
        if isinstance(group_metadata, Consumer):
            group_metadata = group_metadata._c
        self._lt.run(
            self._after_sends(self._p.send_offsets_to_transaction(dict(offsets), group_metadata))
        )

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._lt.run(self._after_sends(self._p.commit_transaction()), timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._lt.run(self._after_sends(self._p.abort_transaction()), timeout)

    def close(self, timeout: float | None = None) -> None:
        try:
            self._lt.run(self._p.close(timeout))
        finally:
            self._lt.stop()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Consumer:
    """Blocking facade over :class:`AsyncConsumer` (same arguments)."""

    def __init__(self, bootstrap: str | Sequence[str], **config: Any) -> None:
        from headwater.client.consumer import AsyncConsumer

        self._lt = _LoopThread("headwater-consumer")
        self._c = AsyncConsumer(bootstrap, **config)

    async def _do(self, fn: Any, *args: Any) -> Any:
        return fn(*args)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._lt.run(self._do(self._c.assign, list(partitions)))

    def assignment(self) -> set[TopicPartition]:
        return self._c.assignment()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._lt.run(self._do(self._c.seek, tp, offset))

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self._lt.run(self._c.seek_to_beginning(*tps))

    def seek_to_end(self, *tps: TopicPartition) -> None:
        self._lt.run(self._c.seek_to_end(*tps))

    def position(self, tp: TopicPartition) -> int:
        return self._lt.run(self._c.position(tp))

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._lt.run(self._c.offsets_for_times(timestamps))

    def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._lt.run(self._c.beginning_offsets(list(tps)))

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._lt.run(self._c.end_offsets(list(tps)))

    def poll(self, timeout_ms: float = 500, max_records: int = 500) -> list[ConsumerRecord]:
        """Like :meth:`AsyncConsumer.poll`. The loop hands over the decoded batches and the
        records are built here, on the caller's thread: the loop goes back to its fetch
        streams sooner (10% more records/s at 1 KiB, docs/benchmarks.md session 36)."""
        from headwater.client.consumer import check_max_records
        from headwater.client.fetched import records_of

        check_max_records(max_records)
        return records_of(self._lt.run(self._c.poll_batches(timeout_ms, max_records)))

    def poll_batches(
        self, timeout_ms: float = 500, max_records: int | None = None
    ) -> list[FetchedBatch]:
        return self._lt.run(self._c.poll_batches(timeout_ms, max_records))

    def subscribe(
        self,
        topics: Iterable[str] = (),
        *,
        pattern: str | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        """Like :meth:`AsyncConsumer.subscribe`; listener callbacks run on the consumer's
        private loop thread."""
        names = [topics] if isinstance(topics, str) else list(topics)
        self._lt.run(self._do(lambda: self._c.subscribe(names, pattern=pattern, listener=listener)))

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        self._lt.run(self._c.commit(offsets))

    def commit_async(
        self, offsets: dict[TopicPartition, int] | None = None
    ) -> concurrent.futures.Future[None]:
        return self._lt.submit(self._c.commit(offsets))

    def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return self._lt.run(self._c.committed(list(tps)))

    @property
    def generation(self) -> int:
        return self._c.generation

    @property
    def member_id(self) -> str:
        return self._c.member_id

    def close(self) -> None:
        try:
            self._lt.run(self._c.close())
        finally:
            self._lt.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AdminClient:
    """Blocking facade over :class:`AsyncAdminClient` (same arguments)."""

    def __init__(self, bootstrap: str | Sequence[str], **config: Any) -> None:
        self._lt = _LoopThread("headwater-admin")
        self._a = AsyncAdminClient(bootstrap, **config)

    def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False) -> Any:
        return self._lt.run(self._a.create_topics(list(topics), validate_only=validate_only))

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
    ) -> str:
        return self._lt.run(self._a.create_topic(name, partitions, replication_factor, configs))

    def delete_topics(self, names: Iterable[str]) -> None:
        self._lt.run(self._a.delete_topics(list(names)))

    def create_partitions(self, topic: str, total_count: int) -> None:
        self._lt.run(self._a.create_partitions(topic, total_count))

    def alter_topic_configs(
        self,
        topic: str,
        set_configs: Mapping[str, str] | None = None,
        delete: Iterable[str] = (),
    ) -> None:
        self._lt.run(self._a.alter_topic_configs(topic, set_configs, list(delete)))

    def elect_leaders(
        self,
        partitions: Iterable[TopicPartition | tuple[str, int]] | None = None,
        *,
        election_type: str = "preferred",
    ) -> list[ElectionResult]:
        return self._lt.run(
            self._a.elect_leaders(
                list(partitions) if partitions is not None else None, election_type=election_type
            )
        )

    def alter_partition_reassignments(
        self, targets: Mapping[TopicPartition | tuple[str, int], Sequence[int] | None]
    ) -> None:
        self._lt.run(self._a.alter_partition_reassignments(targets))

    def list_partition_reassignments(self) -> list[Reassignment]:
        return self._lt.run(self._a.list_partition_reassignments())

    def describe_cluster(self) -> ClusterDescription:
        return self._lt.run(self._a.describe_cluster())

    def describe_configs(
        self, resources: Iterable[ConfigResource], *, include_defaults: bool = False
    ) -> dict[ConfigResource, list[ConfigEntry]]:
        return self._lt.run(
            self._a.describe_configs(list(resources), include_defaults=include_defaults)
        )

    def alter_configs(
        self,
        resource: ConfigResource,
        set_configs: Mapping[str, str] | None = None,
        delete: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        self._lt.run(
            self._a.alter_configs(resource, set_configs, list(delete), validate_only=validate_only)
        )

    def list_topics(self) -> list[str]:
        return self._lt.run(self._a.list_topics())

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        return self._lt.run(self._a.describe_topics(None if names is None else list(names)))

    def list_offsets(
        self, wanted: Mapping[TopicPartition, int | str]
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        return self._lt.run(self._a.list_offsets(wanted))

    def list_groups(self, states: Iterable[str] = ()) -> list[ListedGroup]:
        return self._lt.run(self._a.list_groups(list(states)))

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        return self._lt.run(self._a.describe_groups(list(group_ids)))

    def delete_groups(self, group_ids: Iterable[str]) -> None:
        self._lt.run(self._a.delete_groups(list(group_ids)))

    def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        return self._lt.run(
            self._a.list_consumer_group_offsets(
                group_id, None if partitions is None else list(partitions)
            )
        )

    def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        self._lt.run(self._a.alter_consumer_group_offsets(group_id, offsets))

    def close(self) -> None:
        try:
            self._lt.run(self._a.close())
        finally:
            self._lt.stop()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
