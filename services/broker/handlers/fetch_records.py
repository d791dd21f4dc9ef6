"""FetchRecords: the Fetch stream (same loop, same errors) decoded into protobuf Records.

The convenience path for clients that do not implement the batch format: batches are decoded
on the broker (CRC checked, decompressed) and records before the requested position — the
first batch may start earlier — are dropped. Control records (transaction markers) are never
returned, whatever the isolation level.

READ_COMMITTED (docs/transactions.md, the consumer's algorithm run on the broker): the stream
reads only below the last stable offset and gets the aborted transactions overlapping each
chunk. Walking the batches in offset order, a producer id joins the *aborted set* when a batch
reaches (last offset >=) that transaction's first offset, and leaves it at its ABORT marker;
transactional batches of producers in the set are dropped.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence

from headwater.batch import decode_batches
from headwater.batch.control import parse_control_batch
from headwater.errors import message_of
from headwater.v1 import broker_pb2
from services.broker.codes import error_code
from services.broker.handlers.fetch import chunks
from services.broker.replica_manager import ReplicaManager

#: Decode in a worker thread above this many bytes.
_INLINE_DECODE_BYTES = 64 * 1024


def decode(
    data: bytes, start: int, aborted: Sequence[tuple[int, int]] | None = None
) -> list[broker_pb2.Record]:
    """The records of ``data`` at or after ``start``, control records removed; with
    ``aborted`` (READ_COMMITTED: ``(producer_id, first_offset)`` ascending by first offset)
    the records of aborted transactions removed too."""
    out: list[broker_pb2.Record] = []
    pending = deque(sorted(aborted or (), key=lambda a: a[1]))
    in_aborted: set[int] = set()
    for batch in decode_batches(data):
        h = batch.header
        while pending and pending[0][1] <= h.last_offset:
            in_aborted.add(pending.popleft()[0])
        if h.is_control:
            if h.producer_id in in_aborted and not parse_control_batch(batch.raw).committed:
                in_aborted.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in in_aborted:
            continue
        if h.last_offset < start:
            continue
        for r in batch.records():
            if r.offset < start:
                continue
            out.append(to_proto_record(r.offset, r.timestamp, r.key, r.value, r.headers))
    return out


def to_proto_record(
    offset: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
) -> broker_pb2.Record:
    """One record as the protobuf Record of the plain-records path (FetchRecords and the group
    stream): a None key or value stays unset (null), a header's None value too."""
    rec = broker_pb2.Record(offset=offset, timestamp=timestamp)
    if key is not None:
        rec.key = key
    if value is not None:
        rec.value = value
    for hk, hv in headers:
        h = rec.headers.add(key=hk)
        if hv is not None:
            h.value = hv
    return rec


async def handle(
    rm: ReplicaManager, req: broker_pb2.FetchRequest
) -> AsyncIterator[broker_pb2.FetchRecordsResponse]:
    async for c in chunks(rm, req):
        if c.error is not None:
            yield broker_pb2.FetchRecordsResponse(
                error_code=error_code(c.error),
                error_message=message_of(c.error),
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                next_offset=c.next_offset,
            )
            return
        aborted = c.aborted if req.isolation_level == broker_pb2.READ_COMMITTED else None
        if len(c.data) > _INLINE_DECODE_BYTES:
            records = await asyncio.to_thread(decode, c.data, c.start, aborted)
        else:
            records = decode(c.data, c.start, aborted)
        yield broker_pb2.FetchRecordsResponse(
            high_watermark=c.high_watermark,
            last_stable_offset=c.last_stable_offset,
            log_start_offset=c.log_start_offset,
            records=records,
            next_offset=c.next_offset,
        )
