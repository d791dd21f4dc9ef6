"""Fetch: a server stream of record batches of one partition, for as long as the client wants.

The stream (one per partition per consumer) runs this loop on the event loop:

1. look the partition up: it must exist (``UNKNOWN_TOPIC_OR_PARTITION``), be led here
   (``NOT_LEADER_OR_FOLLOWER``), and match the client's ``current_leader_epoch`` when one is
   given (older: ``FENCED_LEADER_EPOCH``, newer: ``UNKNOWN_LEADER_EPOCH``); the sizes must not
   be negative (below). This is re-checked before every response, so a stream notices
   leadership moving or the partition being deleted;
2. read whole batches from the position up to the high watermark — READ_COMMITTED: up to the
   last stable offset (``Log.read`` in a worker thread) until ``min_bytes`` are collected or
   ``max_bytes`` reached (the first batch is always sent whole, even when larger than
   ``max_bytes``);
3. when caught up, wait on the partition's change notification, at most ``max_wait_ms`` from
   the start of this response, then send what was collected — possibly nothing, so the client
   still learns the high watermark and log start offset;
4. advance to ``next_offset`` and repeat.

Every response carries ``last_stable_offset`` (``min(HW, first offset of the oldest open
transaction)``, docs/transactions.md). A READ_COMMITTED response also lists in
``aborted_transactions`` the aborted transactions overlapping what it carries (first offset <=
the last offset sent, abort marker at or after the fetch offset). The LSO moves when the HW does
and when a marker closes a transaction; both fire the partition's change notification, so a
READ_COMMITTED stream waiting at the LSO wakes up.

Errors are answered in-band: one response carrying the error code (``OFFSET_OUT_OF_RANGE``
when the position is below the log start or above the log end, or any lookup error above),
after which the stream ends normally. The stream also ends when the client cancels it (the
handler task is cancelled at its current await). gRPC flow control bounds what is buffered for
a slow reader: ``yield`` waits until the message is written; the bytes a stream holds meanwhile
come from the broker's :class:`~services.broker.fetch_memory.FetchMemory` (bounded per
connection and per broker), so stalled or very many streams wait instead of growing the heap.

Defaults for unset (zero) fields, as proto3 has no other "unset": ``max_wait_ms`` 0 -> 500 (a
larger value than 30 000 is clamped to 30 000), ``min_bytes`` 0 -> 1, ``max_bytes`` 0 -> 1 MiB
(the Python consumer's default per partition). A negative ``max_bytes`` is
``INVALID_FETCH_SIZE``, a negative ``max_wait_ms`` or ``min_bytes`` and an isolation level
outside the enum are ``INVALID_REQUEST``: checked before the first response, which then carries
the error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from headwater import timeouts
from headwater.errors import (
    FencedLeaderEpochError,
    HeadwaterError,
    InvalidFetchSizeError,
    InvalidRequestError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    message_of,
)
from headwater.v1 import broker_pb2
from services.broker import metrics
from services.broker.codes import error_code
from services.broker.fetch_memory import FetchMemory
from services.broker.partition import Partition
from services.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

DEFAULT_MAX_WAIT_MS = 500
#: ``max_bytes`` when the request leaves it 0 (unset).
DEFAULT_MAX_BYTES = 1024 * 1024
#: A larger ``max_wait_ms`` is clamped to this (a long poll never outlives it).
MAX_WAIT_CAP_MS = 30_000


@dataclass(frozen=True)
class Chunk:
    """One long-poll answer: batches read from ``start`` up to ``next_offset``, or an error."""

    start: int
    data: bytes
    next_offset: int
    high_watermark: int
    log_start_offset: int
    error: BaseException | None = None
    last_stable_offset: int = -1
    #: READ_COMMITTED only: ``(producer_id, first_offset)`` overlapping ``data``, ascending.
    aborted: tuple[tuple[int, int], ...] = ()


def _lookup(rm: ReplicaManager, req: broker_pb2.FetchRequest) -> Partition:
    p = rm.leader_partition(req.topic, req.partition)
    wanted = req.current_leader_epoch
    if wanted >= 0 and wanted != p.leader_epoch:
        cls = FencedLeaderEpochError if wanted < p.leader_epoch else UnknownLeaderEpochError
        raise cls(
            f"{req.topic}-{req.partition}: request epoch {wanted}, leader epoch {p.leader_epoch}"
        )
    return p


def read_committed(level: int) -> bool:
    """True for READ_COMMITTED; raises INVALID_REQUEST for a level outside the enum."""
    if level not in (broker_pb2.READ_UNCOMMITTED, broker_pb2.READ_COMMITTED):
        raise InvalidRequestError(f"unknown isolation level {level}")
    return level == broker_pb2.READ_COMMITTED


def _check_sizes(req: broker_pb2.FetchRequest) -> None:
    """Negative sizes and waits are refused; 0 means the default (module docstring)."""
    if req.max_bytes < 0:
        raise InvalidFetchSizeError(f"max_bytes must be >= 0 (0: the default), got {req.max_bytes}")
    for name in ("max_wait_ms", "min_bytes"):
        value = getattr(req, name)
        if value < 0:
            raise InvalidRequestError(f"{name} must be >= 0 (0: the default), got {value}")


def _check_position(p: Partition, position: int) -> None:
    start, end = p.log_start_offset, p.log_end_offset
    if position < start or position > end:
        raise OffsetOutOfRangeError(
            f"offset {position} is outside [{start}, {end}] of {p.topic}-{p.partition}"
        )


class _Account:
    """What one stream holds of the broker's :class:`FetchMemory` (nothing without one)."""

    def __init__(self, memory: FetchMemory | None, peer: str) -> None:
        self.memory, self.peer, self.held = memory, peer, 0

    async def read(self, p: Partition, position: int, wanted: int, bound: int) -> Any:
        if self.memory is None:
            return await p.read(position, wanted, bound)
        grant = await self.memory.acquire(self.peer, wanted)
        used = 0
        try:
            part = await p.read(position, grant, bound)
            used = len(part.data) if part.data else 0
            return part
        finally:
            self.memory.settle(self.peer, grant, used)
            self.held += used

    def release(self, nbytes: int | None = None) -> None:
        """Give back ``nbytes`` (default: everything held)."""
        n = self.held if nbytes is None else nbytes
        if self.memory is not None:
            self.memory.release(self.peer, n)
        self.held -= n


async def chunks(
    rm: ReplicaManager,
    req: broker_pb2.FetchRequest,
    memory: FetchMemory | None = None,
    peer: str = "",
) -> AsyncIterator[Chunk]:
    """The stream's answers, ending after the first error chunk. With ``memory``, the bytes
    of each read are taken from it first and given back once the consumer of this generator
    asks for the next chunk (the response was written) or the stream ends."""
    account = _Account(memory, peer)
    try:
        async for chunk in _chunks(rm, req, account):
            yield chunk
            account.release()
    finally:
        account.release()


async def _chunks(
    rm: ReplicaManager, req: broker_pb2.FetchRequest, account: _Account
) -> AsyncIterator[Chunk]:
    loop = asyncio.get_running_loop()
    position = req.offset
    wait_ms = req.max_wait_ms if req.max_wait_ms > 0 else DEFAULT_MAX_WAIT_MS
    max_wait = min(wait_ms, MAX_WAIT_CAP_MS) / 1000.0
    min_bytes = max(req.min_bytes, 1)
    max_bytes = req.max_bytes if req.max_bytes != 0 else DEFAULT_MAX_BYTES
    p: Partition | None = None
    committed_only = False
    while True:
        start = position
        pieces: list[bytes] = []
        size = 0
        try:
            _check_sizes(req)
            committed_only = read_committed(req.isolation_level)
            deadline = loop.time() + max_wait
            while True:
                p = _lookup(rm, req)
                changed = p.changed()  # captured before checking, so no wake-up is missed
                _check_position(p, position)
                bound = p.last_stable_offset if committed_only else p.high_watermark
                if position < bound and size < max_bytes:
                    part = await account.read(p, position, max_bytes - size, bound)
                    if part.data and part.next_offset > position:
                        pieces.append(part.data)
                        size += len(part.data)
                        position = part.next_offset
                        if size >= min_bytes:
                            break
                        continue
                    account.release(len(part.data) if part.data else 0)
                if size >= max_bytes:
                    break
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    await timeouts.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    break
            aborted: list[tuple[int, int]] = []
            if committed_only and position > start:
                aborted = await p.aborted_transactions(start, position - 1)
        except Exception as exc:
            if not isinstance(exc, HeadwaterError):
                if p is not None and p.is_leader:
                    log.exception("fetch %s-%d failed", req.topic, req.partition)
                    exc = KafkaStorageError(f"reading {req.topic}-{req.partition}: {exc}")
                else:
                    # The log went away under the read (StopReplica): report why.
                    try:
                        _lookup(rm, req)
                    except HeadwaterError as lookup_exc:
                        exc = lookup_exc
            yield Chunk(start, b"", position, -1, -1, exc)
            return
        assert p is not None
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if data:
            metrics.BYTES_OUT.labels(req.topic).inc(len(data))
            metrics.RECORDS_OUT.labels(req.topic).inc(metrics.count_records(data))
        yield Chunk(
            start,
            data,
            position,
            p.high_watermark,
            p.log_start_offset,
            last_stable_offset=p.last_stable_offset,
            aborted=tuple(aborted),
        )


async def handle(
    rm: ReplicaManager,
    req: broker_pb2.FetchRequest,
    memory: FetchMemory | None = None,
    peer: str = "",
) -> AsyncIterator[broker_pb2.FetchResponse]:
    async for c in chunks(rm, req, memory, peer):
        if c.error is not None:
            yield broker_pb2.FetchResponse(
                error_code=error_code(c.error),
                error_message=message_of(c.error),
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                next_offset=c.next_offset,
            )
            return
        yield broker_pb2.FetchResponse(
            high_watermark=c.high_watermark,
            last_stable_offset=c.last_stable_offset,
            log_start_offset=c.log_start_offset,
            records=c.data,
            next_offset=c.next_offset,
            aborted_transactions=[
                broker_pb2.AbortedTransaction(producer_id=pid, first_offset=first)
                for pid, first in c.aborted
            ],
        )
