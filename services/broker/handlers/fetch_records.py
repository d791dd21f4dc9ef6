"""FetchRecords: the Fetch stream (same loop, same errors) decoded into protobuf Records.

The convenience path for clients that do not implement the batch format: batches are decoded
on the broker (CRC checked, decompressed) and records before the requested position — the
first batch may start earlier — are dropped. Control records (transaction markers) are not
returned.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from headwater.batch import decode_batches
from headwater.errors import message_of
from headwater.v1 import broker_pb2
from services.broker.codes import error_code
from services.broker.handlers.fetch import chunks
from services.broker.replica_manager import ReplicaManager

#: Decode in a worker thread above this many bytes.
_INLINE_DECODE_BYTES = 64 * 1024


def decode(data: bytes, start: int) -> list[broker_pb2.Record]:
    out: list[broker_pb2.Record] = []
    for batch in decode_batches(data):
        if batch.header.is_control or batch.header.last_offset < start:
            continue
        for r in batch.records():
            if r.offset < start:
                continue
            rec = broker_pb2.Record(offset=r.offset, timestamp=r.timestamp)
            if r.key is not None:
                rec.key = r.key
            if r.value is not None:
                rec.value = r.value
            for hk, hv in r.headers:
                h = rec.headers.add(key=hk)
                if hv is not None:
                    h.value = hv
            out.append(rec)
    return out


async def handle(
    rm: ReplicaManager, req: broker_pb2.FetchRequest
) -> AsyncIterator[broker_pb2.FetchRecordsResponse]:
    async for c in chunks(rm, req):
        if c.error is not None:
            yield broker_pb2.FetchRecordsResponse(
                error_code=error_code(c.error),
                error_message=message_of(c.error),
                high_watermark=-1,
                log_start_offset=-1,
                next_offset=c.next_offset,
            )
            return
        if len(c.data) > _INLINE_DECODE_BYTES:
            records = await asyncio.to_thread(decode, c.data, c.start)
        else:
            records = decode(c.data, c.start)
        yield broker_pb2.FetchRecordsResponse(
            high_watermark=c.high_watermark,
            log_start_offset=c.log_start_offset,
            records=records,
            next_offset=c.next_offset,
        )
