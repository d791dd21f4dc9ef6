"""LeaderAndIsr, UpdateMetadata, StopReplica: the active controller's commands; and
ControllerLiveness, the stream the controller holds open to detect this process's death.

Each is fenced by the replica manager (``STALE_BROKER_EPOCH`` unless ``broker_epoch`` is this
broker's current registration epoch; ``STALE_CONTROLLER_EPOCH`` when ``controller_epoch`` is
older than the newest seen) and the rejection is answered in the response's ``error_code``
(the RPC itself succeeds), as are per-partition failures.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from headwater import errors
from headwater.v1 import broker_pb2
from services.broker.codes import error_code
from services.broker.replica_manager import ReplicaManager


async def leader_and_isr(
    rm: ReplicaManager, req: broker_pb2.LeaderAndIsrRequest
) -> broker_pb2.LeaderAndIsrResponse:
    return await rm.leader_and_isr(req)


async def update_metadata(
    rm: ReplicaManager, req: broker_pb2.UpdateMetadataRequest
) -> broker_pb2.UpdateMetadataResponse:
    return await rm.update_metadata(req)


async def stop_replica(
    rm: ReplicaManager, req: broker_pb2.StopReplicaRequest
) -> broker_pb2.StopReplicaResponse:
    return await rm.stop_replica(req)


async def controller_liveness(
    rm: ReplicaManager, req: broker_pb2.ControllerLivenessRequest
) -> AsyncIterator[broker_pb2.ControllerLivenessResponse]:
    """One response at once, then the stream stays open until the process stops (or the
    controller cancels it). Fenced like the commands: a stale controller or broker epoch (or a
    broker still registering) gets one response carrying the error and the stream ends."""
    try:
        await rm.check_fence(req.controller_epoch, req.broker_epoch)
    except errors.HeadwaterError as exc:
        yield broker_pb2.ControllerLivenessResponse(
            error_code=error_code(exc), error_message=str(exc), broker_epoch=rm.broker_epoch or 0
        )
        return
    yield broker_pb2.ControllerLivenessResponse(broker_epoch=rm.broker_epoch or 0)
    await asyncio.Event().wait()  # held until cancelled: server stop or the controller leaving
