"""Produce: append record batches to partitions this broker leads.

Per partition entry of the request, in order:

1. the partition must exist (``UNKNOWN_TOPIC_OR_PARTITION``) and be led here
   (``NOT_LEADER_OR_FOLLOWER``); with acks=all the ISR must have at least
   ``min.insync.replicas`` members (``NOT_ENOUGH_REPLICAS``);
2. its bytes are validated whole — every header, the topic's ``max.message.bytes`` per batch
   and every CRC — *before* anything is appended (``CORRUPT_MESSAGE``, ``MESSAGE_TOO_LARGE``,
   ``UNSUPPORTED_COMPRESSION_TYPE``);
3. the batches are appended by the partition's writer (offsets and leader epoch patched,
   LogAppendTime stamped when the topic asks for it). Batches with a producer id are first
   checked against the partition's producer state, in order (docs/transactions.md):
   ``INVALID_PRODUCER_EPOCH``, ``OUT_OF_ORDER_SEQUENCE_NUMBER``, ``UNKNOWN_PRODUCER_ID``,
   ``INVALID_TXN_STATE`` fail the entry with nothing of it appended; an entry whose batches
   are all duplicates of cached ones appends nothing and is answered with success and the
   **original** base offset (with acks=all, once that offset is committed).

A failing entry gets its error code and appends nothing; the other entries are unaffected.
Entries for different partitions are appended concurrently. A numbered request
(``order_key``, broker.proto) validates its entries, then waits, bounded, until the earlier
request it names (``order_after``) has passed, and passes itself once each of its entries has
taken its place in its partition's append order or failed (so the next one's validation
overlaps this one's append), but never before its own wait has ended (a request that fails at
once still holds back the ones after it): :mod:`services.broker.request_order`. The whole
request is refused (``MESSAGE_TOO_LARGE`` status) when its record bytes exceed
``MAX_REQUEST_BYTES``, and (``INVALID_REQUIRED_ACKS``) for an unknown acks value.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from headwater.batch import validate_batches
from headwater.errors import (
    InvalidRequestError,
    InvalidRequiredAcksError,
    MessageTooLargeError,
    message_of,
)
from headwater.platform.log_limits import IntervalWarning
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker import metrics
from services.broker.codes import error_code
from services.broker.handlers.produce_wire import ProduceRequestView
from services.broker.replica_manager import ReplicaManager
from services.broker.request_order import RequestOrder

log = logging.getLogger(__name__)

#: Largest sum of record bytes in one Produce request (gRPC's own limit is 64 MiB).
MAX_REQUEST_BYTES = 60 * 1024 * 1024
#: Default and largest ``timeout_ms`` (the wait for acks=all): larger values are clamped.
DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 300_000
#: Validate larger buffers in a worker thread (CRC at ~20 GB/s: ~12 µs per 256 KiB).
_INLINE_VALIDATE_BYTES = 256 * 1024
#: Appends that fail for the disk (full, read-only, failing): answered KAFKA_STORAGE_ERROR,
#: which producers retry, so they recur on every request; logged at most once per 10 s.
_STORAGE_ERRORS = IntervalWarning(log, 10.0)


def timeout_ms_of(requested: int) -> int:
    """The acks=all wait for a request's ``timeout_ms``: 0 (unset) -> 30 s, at most 5 min;
    a negative value is ``INVALID_REQUEST``."""
    if requested < 0:
        raise InvalidRequestError(f"timeout_ms must be >= 0 (0: the default), got {requested}")
    return min(requested, MAX_TIMEOUT_MS) if requested > 0 else DEFAULT_TIMEOUT_MS


def check_acks(acks: int) -> bool:
    """True for acks=all; raises for values outside the enum."""
    if acks not in (broker_pb2.ACKS_LEADER, broker_pb2.ACKS_NONE, broker_pb2.ACKS_ALL):
        raise InvalidRequiredAcksError(f"unknown acks value {acks}")
    return acks == broker_pb2.ACKS_ALL


async def append_to_partition(
    rm: ReplicaManager,
    topic: str,
    partition: int,
    buf: bytes | memoryview,
    *,
    acks_all: bool,
    timeout_ms: int,
    turn: asyncio.Future[None] | None = None,
    on_queued: Callable[[], None] | None = None,
) -> broker_pb2.PartitionProduceResult:
    """Validate and append one partition's batches; never raises (errors go in the result).
    ``turn``: awaited (shielded) after validation, before the append. ``on_queued`` is called
    exactly once: when the entry takes its place in the partition's append order
    (:meth:`Partition.append`) or when it fails before that."""
    result = broker_pb2.PartitionProduceResult(
        topic=topic, partition=partition, base_offset=-1, log_append_time=-1, log_start_offset=-1
    )
    fired = on_queued is None

    def queued() -> None:
        nonlocal fired
        if not fired:
            fired = True
            assert on_queued is not None
            on_queued()

    try:
        p = rm.leader_partition(topic, partition)
        p.check_writable(acks_all)
        limit = p.config.max_message_bytes
        if len(buf) > _INLINE_VALIDATE_BYTES:
            batches = await asyncio.to_thread(validate_batches, buf, max_batch_bytes=limit)
        else:
            batches = validate_batches(buf, max_batch_bytes=limit)
        if turn is not None:
            await asyncio.shield(turn)  # a cancelled call leaves the turn to run out
        done = await p.append(
            buf,
            batches,
            acks_all=acks_all,
            timeout_ms=timeout_ms,
            on_queued=queued if on_queued is not None else None,
        )
    except Exception as exc:
        queued()
        result.error_code = error_code(exc)
        result.error_message = message_of(exc)
        metrics.PRODUCE_ERRORS.labels(topic, ErrorCode.Name(result.error_code)).inc()
        if result.error_code == ErrorCode.UNKNOWN_SERVER_ERROR:
            log.exception("append to %s-%d failed", topic, partition)
        elif result.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
            _STORAGE_ERRORS.warning("produce to %s-%d: %s", topic, partition, result.error_message)
        return result
    result.base_offset = done.base_offset
    result.log_append_time = done.log_append_time
    result.log_start_offset = done.log_start_offset
    return result


def check_order(req: broker_pb2.ProduceRequest | ProduceRequestView) -> None:
    """The order fields' rules (broker.proto); INVALID_REQUEST when broken."""
    if req.order_key == 0:
        if req.order_number or req.order_after:
            raise InvalidRequestError("order_number and order_after need an order_key")
    elif req.order_number == 0 or req.order_after >= req.order_number:
        raise InvalidRequestError(
            f"order_number must be >= 1 and order_after below it, got order_number "
            f"{req.order_number} and order_after {req.order_after}"
        )


async def handle(
    rm: ReplicaManager,
    req: broker_pb2.ProduceRequest | ProduceRequestView,
    order: RequestOrder | None = None,
) -> broker_pb2.ProduceResponse:
    """``req`` as parsed by :mod:`~services.broker.handlers.produce_wire` (records are views of
    the received bytes) or a generated message. ``order`` (the broker's): honours a numbered
    request's place; without it the order fields are checked and otherwise ignored."""
    acks_all = check_acks(req.acks)
    total = sum(len(pr.records) for pr in req.partitions)
    if total > MAX_REQUEST_BYTES:
        raise MessageTooLargeError(
            f"produce request carries {total} record bytes, limit {MAX_REQUEST_BYTES}"
        )
    timeout_ms = timeout_ms_of(req.timeout_ms)
    check_order(req)
    key = req.order_key if order is not None else 0
    turn: asyncio.Future[None] | None = None
    entry_queued: Callable[[], None] | None = None
    if key:
        assert order is not None
        number = req.order_number
        if order.must_wait(key, req.order_after):
            turn = asyncio.ensure_future(order.wait_turn(key, req.order_after, timeout_ms / 1000))
        left = len(req.partitions)

        def mark_passed() -> None:
            # never before this request's own turn: one that fails at once must not let a
            # later request overtake the earlier one they both come after
            if turn is None or turn.done():
                order.passed(key, number)
            else:
                turn.add_done_callback(lambda _turn: order.passed(key, number))

        def entry_queued() -> None:
            nonlocal left
            left -= 1
            if left == 0:
                mark_passed()

    try:
        results = await asyncio.gather(
            *(
                append_to_partition(
                    rm,
                    pr.topic,
                    pr.partition,
                    pr.records,
                    acks_all=acks_all,
                    timeout_ms=timeout_ms,
                    turn=turn,
                    on_queued=entry_queued,
                )
                for pr in req.partitions
            )
        )
    finally:
        if key:
            mark_passed()  # every entry failed, or the call was cancelled; harmless if done
    return broker_pb2.ProduceResponse(partitions=results)
