"""ListOffsets: earliest (-2), latest (-1) or the first offset with timestamp >= t.

Answered by the partition leader only. "Latest" is the high watermark (what READ_UNCOMMITTED
consumers can read); with READ_COMMITTED it is the last stable offset (docs/transactions.md);
an isolation level outside the enum is INVALID_REQUEST for every partition. By timestamp: the
first record at or after ``t`` below the high watermark, with that record's timestamp;
``offset = -1`` when there is none. Errors are per partition.
"""

from __future__ import annotations

from headwater.errors import InvalidRequestError, message_of
from headwater.platform.limits import paced
from headwater.v1 import broker_pb2
from services.broker.codes import error_code
from services.broker.handlers.fetch import read_committed
from services.broker.replica_manager import ReplicaManager

EARLIEST = -2
LATEST = -1


async def _one(
    rm: ReplicaManager, q: broker_pb2.ListOffsetsPartition, level: int
) -> broker_pb2.ListOffsetsResult:
    res = broker_pb2.ListOffsetsResult(
        topic=q.topic, partition=q.partition, offset=-1, timestamp=-1
    )
    try:
        committed_only = read_committed(level)
        p = rm.leader_partition(q.topic, q.partition)
        res.leader_epoch = p.leader_epoch
        if q.timestamp == EARLIEST:
            res.offset = p.log_start_offset
        elif q.timestamp == LATEST:
            res.offset = p.last_stable_offset if committed_only else p.high_watermark
        elif q.timestamp < 0:
            raise InvalidRequestError(f"invalid timestamp {q.timestamp} (use -1, -2 or >= 0)")
        else:
            hw = p.high_watermark
            found = await p.offset_for_timestamp(q.timestamp)
            if found is not None and found.offset < hw:
                res.offset = found.offset
                res.timestamp = found.timestamp
    except Exception as exc:
        res.error_code = error_code(exc)
        res.error_message = message_of(exc)
    return res


async def handle(
    rm: ReplicaManager, req: broker_pb2.ListOffsetsRequest
) -> broker_pb2.ListOffsetsResponse:
    return broker_pb2.ListOffsetsResponse(
        partitions=[await _one(rm, q, req.isolation_level) async for q in paced(req.partitions)]
    )
