"""LeaderAndIsr requests for a single-broker ReplicaManager driven in-process (shared by the
broker tests that apply them)."""

from __future__ import annotations

from headwater.v1 import broker_pb2, metadata_pb2

ME = 1
BROKER_EPOCH = 7


def assignment(topic: str, partition: int, epoch: int) -> broker_pb2.PartitionAssignment:
    return broker_pb2.PartitionAssignment(
        topic=topic,
        state=metadata_pb2.PartitionState(
            partition=partition,
            leader=ME,
            leader_epoch=epoch,
            partition_epoch=epoch,
            replicas=[ME],
            isr=[ME],
        ),
    )


def request(*assignments: broker_pb2.PartitionAssignment) -> broker_pb2.LeaderAndIsrRequest:
    return broker_pb2.LeaderAndIsrRequest(
        controller_epoch=1, broker_epoch=BROKER_EPOCH, partitions=list(assignments)
    )
