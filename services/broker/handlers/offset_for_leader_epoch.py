"""OffsetForLeaderEpoch: where a leader epoch ends on this leader (KIP-101/279).

Per partition: led here (``NOT_LEADER_OR_FOLLOWER`` / ``UNKNOWN_TOPIC_OR_PARTITION``),
``current_leader_epoch`` fenced like a fetch (``FENCED_LEADER_EPOCH`` / ``UNKNOWN_LEADER_EPOCH``),
then ``(largest epoch <= leader_epoch, its end offset)`` from the log's epoch cache
(``-1/-1`` when unknown). A follower truncates to the answer before fetching.
"""

from __future__ import annotations

import asyncio

from headwater.errors import message_of
from headwater.v1 import broker_pb2
from services.broker.codes import error_code
from services.broker.handlers.replica_fetch import leader_for
from services.broker.replica_manager import ReplicaManager


async def handle(
    rm: ReplicaManager, req: broker_pb2.OffsetForLeaderEpochRequest
) -> broker_pb2.OffsetForLeaderEpochResponse:
    resp = broker_pb2.OffsetForLeaderEpochResponse()
    for item in req.partitions:
        out = broker_pb2.EpochEndOffset(
            topic=item.topic, partition=item.partition, leader_epoch=-1, end_offset=-1
        )
        try:
            p = leader_for(rm, item.topic, item.partition, item.current_leader_epoch)
            # An in-memory lookup: on the loop unless a thread holds the log (a failover's
            # followers ask for hundreds of partitions in one request).
            found = p.log.end_offset_for_epoch_if_uncontended(item.leader_epoch)
            if found is None:
                found = await asyncio.to_thread(p.log.end_offset_for_epoch, item.leader_epoch)
            epoch, end = found
            out.leader_epoch, out.end_offset = epoch, end
        except Exception as exc:
            out.error_code = error_code(exc)
            out.error_message = message_of(exc)
        resp.partitions.append(out)
    return resp
