"""LeaderAndIsr, UpdateMetadata, StopReplica: the active controller's commands.

Each is fenced by the replica manager (``STALE_BROKER_EPOCH`` unless ``broker_epoch`` is this
broker's current registration epoch; ``STALE_CONTROLLER_EPOCH`` when ``controller_epoch`` is
older than the newest seen) and the rejection is answered in the response's ``error_code``
(the RPC itself succeeds), as are per-partition failures.
"""

from __future__ import annotations

from headwater.v1 import broker_pb2
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
