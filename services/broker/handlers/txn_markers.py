"""Broker.WriteTxnMarkers: append COMMIT/ABORT control batches for a transaction coordinator.

For every marker and every partition in it (all handled concurrently; each partition's own
appends stay serialised by its writer lock):

1. the marker must name a producer (``producer_id``, ``producer_epoch`` and
   ``coordinator_epoch`` >= 0, else ``INVALID_REQUEST``);
   the partition must exist (``UNKNOWN_TOPIC_OR_PARTITION``) and be led here
   (``NOT_LEADER_OR_FOLLOWER``), as for Produce;
2. :meth:`Partition.write_marker` appends the control batch (the Log checks the marker's
   producer epoch, ``INVALID_PRODUCER_EPOCH``, and coordinator epoch,
   ``TRANSACTION_COORDINATOR_FENCED``; nothing is written on either) and waits, like acks=all,
   until the high watermark has passed it (``NOT_ENOUGH_REPLICAS``,
   ``NOT_ENOUGH_REPLICAS_AFTER_APPEND``, ``REQUEST_TIMED_OUT`` after ``MARKER_TIMEOUT_MS``).

Each partition's outcome is one ``WriteTxnMarkerResult``; the coordinator retries failed ones
(a marker for a producer with no open transaction is appended and changes nothing else, so a
retry is harmless). Results come back in request order.
"""

from __future__ import annotations

import asyncio
import logging

from headwater.errors import InvalidRequestError, message_of
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.codes import error_code
from services.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

#: How long one marker may wait to be committed (the request carries no timeout).
MARKER_TIMEOUT_MS = 30_000


async def _one(
    rm: ReplicaManager, m: broker_pb2.WriteTxnMarker, topic: str, partition: int
) -> broker_pb2.WriteTxnMarkerResult:
    res = broker_pb2.WriteTxnMarkerResult(
        producer_id=m.producer_id, topic=topic, partition=partition
    )
    try:
        if m.producer_id < 0 or m.producer_epoch < 0 or m.coordinator_epoch < 0:
            raise InvalidRequestError(
                f"marker needs producer_id, producer_epoch and coordinator_epoch >= 0, got "
                f"{m.producer_id}/{m.producer_epoch}/{m.coordinator_epoch}"
            )
        p = rm.leader_partition(topic, partition)
        await p.write_marker(
            m.producer_id,
            m.producer_epoch,
            m.committed,
            m.coordinator_epoch,
            MARKER_TIMEOUT_MS,
        )
    except Exception as exc:
        res.error_code = error_code(exc)
        res.error_message = message_of(exc)
        if res.error_code == ErrorCode.UNKNOWN_SERVER_ERROR:
            log.exception("marker for producer %d on %s-%d failed", m.producer_id, topic, partition)
    return res


async def handle(
    rm: ReplicaManager, req: broker_pb2.WriteTxnMarkersRequest
) -> broker_pb2.WriteTxnMarkersResponse:
    results = await asyncio.gather(
        *(_one(rm, m, tp.topic, tp.partition) for m in req.markers for tp in m.partitions)
    )
    return broker_pb2.WriteTxnMarkersResponse(results=results)
