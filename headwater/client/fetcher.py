"""The consumer's fetcher: one ``Broker.Fetch`` stream per assigned partition, its buffer,
and the decoded batches ``poll`` hands out (as aiokafka's ``fetcher.py``).

Fetching: one task per assigned partition holds one ``Broker.Fetch`` server stream at a time,
starting at the position, and appends each response's raw batches to the partition's buffer
(tagged with the partition's *epoch*, bumped by every seek so stale data is dropped). The
buffer is bounded: when it holds ``max_buffer_bytes`` the task stops reading the stream and
gRPC flow control holds the broker back. The task restarts the stream after retriable errors
(metadata refresh, new leader) and applies ``auto_offset_reset`` on OFFSET_OUT_OF_RANGE.
A response's ``throttle_time_ms`` (quota, docs/quotas.md) pauses reading the stream for that
long; the broker holds the stream's next response as well. Non-retriable errors are kept on
the partition and raised by the next ``poll``.

Handing out (:meth:`Fetcher.collect`): decoding (CRC check, decompression) happens on whole
batches when ``poll`` takes them; each response's batches pass
:func:`headwater.client.txn_filter.keep_flags` (control batches are never delivered;
read_committed drops aborted transactions' batches) and positions advance past dropped
batches. Partitions are visited round-robin, from a different one at each call.

Ownership: everything runs on the consumer's event loop. The ``parts`` dict is the
consumer's assignment (the consumer adds and removes entries, the fetcher reads them); the
fetch task of a partition is the only writer of its ``pending`` list, ``collect`` the only
reader; positions are changed only by ``collect``, the seek methods and an offset reset.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from headwater import errors
from headwater.batch import RecordBatch, decode_batches
from headwater.client import txn_filter
from headwater.client.connection import ConnectionPool
from headwater.client.fetched import FetchedBatch, first_index_at, offset_at
from headwater.client.metadata import Metadata
from headwater.client.offsets import EARLIEST, LATEST, list_offsets
from headwater.client.types import TopicPartition
from headwater.v1 import broker_pb2

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """The consumer settings the fetcher uses (``AsyncConsumer`` validates them)."""

    auto_offset_reset: str  # earliest | latest | none
    fetch_max_wait_ms: int
    fetch_min_bytes: int
    max_partition_fetch_bytes: int
    max_buffer_bytes: int
    timeout_s: float
    backoff_s: float
    check_crcs: bool
    client_id: str
    isolation: broker_pb2.IsolationLevel  # READ_COMMITTED | READ_UNCOMMITTED
    read_committed: bool


class PartitionState:
    """Fetch state of one assigned partition (see module docstring for ownership)."""

    __slots__ = (
        "buffered",
        "epoch",
        "error",
        "high_watermark",
        "pending",
        "position",
        "ready",
        "space",
        "task",
        "tp",
    )

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.position: int | None = None
        self.epoch = 0
        self.task: asyncio.Task[None] | None = None
        # (epoch, raw batches, the response's aborted transactions as (pid, first_offset))
        self.pending: deque[tuple[int, memoryview, list[tuple[int, int]]]] = deque()
        # decoded, at or past position; False: dropped by the transaction filter
        self.ready: deque[tuple[RecordBatch, bool]] = deque()
        self.buffered = 0
        self.space = asyncio.Event()
        self.space.set()
        self.error: errors.HeadwaterError | None = None
        self.high_watermark = -1

    def reset_buffers(self) -> None:
        self.epoch += 1
        self.pending.clear()
        self.ready.clear()
        self.buffered = 0
        self.space.set()
        self.error = None

    def consumed(self, nbytes: int, limit: int) -> None:
        self.buffered -= nbytes
        if self.buffered < limit:
            self.space.set()

    def stop(self) -> None:
        """Drop the buffers (a new epoch) and cancel the fetch task, if any."""
        self.reset_buffers()
        if self.task is not None:
            self.task.cancel()
            self.task = None


class Fetcher:
    """Fetch tasks and buffers of the consumer's assigned partitions (see module doc)."""

    def __init__(
        self,
        pool: ConnectionPool,
        metadata: Metadata,
        wake: asyncio.Event,
        parts: dict[TopicPartition, PartitionState],
        config: FetchConfig,
    ) -> None:
        self._pool = pool
        self._md = metadata
        #: set whenever a partition gets data, an error or loses its task: ``poll`` waits on it
        self._wake = wake
        self._parts = parts
        self._cfg = config
        self._rr = 0

    def ensure_fetching(self) -> None:
        loop = asyncio.get_running_loop()
        for st in self._parts.values():
            if st.task is None and st.position is not None and st.error is None:
                st.task = loop.create_task(
                    self._fetch_loop(st, st.epoch, st.position),
                    name=f"fetch-{st.tp.topic}-{st.tp.partition}",
                )
                st.task.add_done_callback(self._fetch_done(st))

    def _fetch_done(self, st: PartitionState) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            if st.task is task:
                st.task = None
            if not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                log.error("fetch task for %s died", st.tp, exc_info=exc)
                st.error = errors.UnknownServerError(f"fetch task died: {exc!r}")
            self._wake.set()

        return done

    async def _fetch_loop(self, st: PartitionState, epoch: int, offset: int) -> None:
        """Hold a Fetch stream for ``st`` from ``offset``; the partition's only writer."""
        pool, md, cfg = self._pool, self._md, self._cfg
        tp = st.tp
        while st.epoch == epoch:
            address = md.view.leader_address(tp)
            if address is None:
                try:
                    await md.refresh()
                except errors.HeadwaterError as exc:
                    log.debug("metadata refresh for %s failed: %s", tp, exc)
                if md.view.leader_address(tp) is None:
                    await asyncio.sleep(cfg.backoff_s)
                continue
            request = broker_pb2.FetchRequest(
                topic=tp.topic,
                partition=tp.partition,
                offset=offset,
                max_wait_ms=cfg.fetch_max_wait_ms,
                min_bytes=cfg.fetch_min_bytes,
                max_bytes=cfg.max_partition_fetch_bytes,
                replica_id=-1,
                current_leader_epoch=-1,
                client_id=cfg.client_id,
                isolation_level=cfg.isolation,
            )
            call = pool.raw_fetch(address)(request)
            err: errors.HeadwaterError | None = None
            try:
                async for resp in call:
                    if st.epoch != epoch:
                        return
                    if resp.error_code:
                        err = errors.error_for_code(resp.error_code, resp.error_message)
                        break
                    st.high_watermark = resp.high_watermark
                    records = resp.records  # a view of the received message
                    if records:
                        st.pending.append((epoch, records, resp.aborted))
                        st.buffered += len(records)
                        self._wake.set()
                        offset = resp.next_offset
                        if st.buffered >= cfg.max_buffer_bytes:
                            st.space.clear()
                            await st.space.wait()
                    elif resp.next_offset > offset:
                        offset = resp.next_offset
                    if resp.throttle_time_ms > 0:  # quota: read no further until it passes
                        await asyncio.sleep(resp.throttle_time_ms / 1000)
            except grpc.RpcError as exc:
                err = errors.from_rpc_error(exc)
            finally:
                call.cancel()
            if st.epoch != epoch:
                return
            if err is None:
                continue  # the broker ended the stream; open a new one
            if isinstance(err, errors.OffsetOutOfRangeError):
                if cfg.auto_offset_reset == "none":
                    st.error = err
                    return
                spec = EARLIEST if cfg.auto_offset_reset == "earliest" else LATEST
                found = await list_offsets(
                    pool, md, {tp: spec}, timeout_s=cfg.timeout_s, isolation_level=cfg.isolation
                )
                if st.epoch != epoch:
                    return
                log.info("%s: offset %d out of range, reset to %d", tp, offset, found[tp].offset)
                st.reset_buffers()
                epoch = st.epoch
                st.position = offset = found[tp].offset
                continue
            if not err.retriable:
                st.error = err
                return
            log.debug("fetch %s: %s; retrying", tp, err)
            if err.invalid_metadata:
                md.request_update()
            await asyncio.sleep(cfg.backoff_s)

    def _take(self, st: PartitionState, budget: int | None) -> tuple[list[FetchedBatch], int]:
        """Hand out decoded batches of ``st`` from its position, at most ``budget`` records."""
        cfg = self._cfg
        limit = cfg.max_buffer_bytes
        out: list[FetchedBatch] = []
        taken = 0
        while budget is None or taken < budget:
            if not st.ready:
                if not st.pending:
                    break
                epoch, raw, aborted = st.pending.popleft()
                if epoch != st.epoch:
                    continue
                try:
                    batches = decode_batches(raw, check_crc=cfg.check_crcs)
                    keep = txn_filter.keep_flags(
                        batches, aborted, read_committed=cfg.read_committed
                    )
                except errors.HeadwaterError as exc:
                    st.consumed(len(raw), limit)
                    st.error = exc
                    break
                st.ready.extend(zip(batches, keep, strict=True))
            b, deliver = st.ready[0]
            pos = st.position if st.position is not None else b.header.base_offset
            if not deliver:
                st.ready.popleft()
                st.consumed(b.header.total_size, limit)
                st.position = max(pos, b.header.next_offset)
                continue
            start = first_index_at(b, pos)
            count = b.header.record_count
            stop = count if budget is None else min(count, start + budget - taken)
            if stop >= count:
                st.ready.popleft()
                st.consumed(b.header.total_size, limit)
            if start < stop:
                out.append(FetchedBatch(st.tp, b, start, stop))
                taken += stop - start
            st.position = max(pos, offset_at(b, stop))
        return out, taken

    def collect(self, max_records: int | None) -> list[FetchedBatch]:
        parts = list(self._parts.values())
        if not parts:
            return []
        self._rr = (self._rr + 1) % len(parts)
        out: list[FetchedBatch] = []
        left = max_records
        for st in parts[self._rr :] + parts[: self._rr]:
            if st.error is not None and not out:
                exc, st.error = st.error, None
                raise exc
            got, n = self._take(st, left)
            out.extend(got)
            if left is not None:
                left -= n
                if left <= 0:
                    break
        return out
