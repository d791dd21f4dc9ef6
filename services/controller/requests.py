"""Controller -> broker requests, built from the event loop's state (a mixin of
:class:`services.controller.events.ControllerLoop`; called only on the event-loop task).

* LeaderAndIsr: one batched request per live replica broker, many partitions;
* UpdateMetadata: the full snapshot (brokers, topics with leadership, the controller's own
  endpoint) to every live broker;
* StopReplica: per broker, the partitions it must stop (and delete) serving.

Each request carries the controller epoch and the target's broker epoch; delivery, retries
and coalescing belong to :mod:`services.controller.broker_channels`.
"""

from __future__ import annotations

from collections.abc import Iterable

from headwater.v1 import broker_pb2, metadata_pb2
from services.controller import cluster_state as cs
from services.controller import state as st
from services.controller.broker_channels import BrokerChannels

PartitionKey = tuple[str, int]


class BrokerRequests:
    state: cs.ClusterState | None
    epoch: int | None
    channels: BrokerChannels
    controller_id: int
    host: str
    port: int
    coordinators: tuple[metadata_pb2.BrokerInfo, ...]

    def partition_pb(self, key: PartitionKey) -> metadata_pb2.PartitionState:
        assert self.state is not None
        s = self.state.partitions.get(key)
        replicas = self.state.topics[key[0]].assignment[key[1]]
        if s is None:
            return metadata_pb2.PartitionState(
                partition=key[1], leader=-1, replicas=replicas, isr=[]
            )
        return metadata_pb2.PartitionState(
            partition=key[1],
            leader=s.leader,
            leader_epoch=s.leader_epoch,
            replicas=replicas,
            isr=list(s.isr),
            partition_epoch=s.partition_epoch,
            controller_epoch=s.controller_epoch,
            adding_replicas=list(s.adding_replicas),
            removing_replicas=list(s.removing_replicas),
        )

    def send_leader_and_isr(
        self,
        keys: Iterable[PartitionKey],
        *,
        only: int | None = None,
        exclude: int | None = None,
        leading: bool | None = None,
    ) -> None:
        """One batched LeaderAndIsr per live replica broker of ``keys``; with ``leading``
        True (False) only the partitions that broker leads (follows) go to it."""
        assert self.state is not None and self.epoch is not None
        per_broker: dict[int, list[broker_pb2.PartitionAssignment]] = {}
        for key in keys:
            topic = self.state.topics.get(key[0])
            if topic is None or key[1] not in topic.assignment:
                continue
            assignment = broker_pb2.PartitionAssignment(
                topic=key[0],
                topic_id=topic.topic_id,
                state=self.partition_pb(key),
                configs=topic.configs,
            )
            leader = assignment.state.leader
            for bid in topic.assignment[key[1]]:
                if leading is not None and (bid == leader) != leading:
                    continue
                if bid in self.state.brokers and bid != exclude and only in (None, bid):
                    per_broker.setdefault(bid, []).append(assignment)
        for bid, items in per_broker.items():
            self.channels.send(
                bid,
                broker_pb2.LeaderAndIsrRequest(
                    controller_id=self.controller_id,
                    controller_epoch=self.epoch,
                    broker_epoch=self.state.brokers[bid].epoch,
                    partitions=items,
                ),
            )

    def send_update_metadata(self) -> None:
        """The full metadata snapshot to every live broker."""
        assert self.state is not None and self.epoch is not None
        brokers = [broker_info(b) for _, b in sorted(self.state.brokers.items())]
        topics = [
            metadata_pb2.TopicMetadata(
                name=name,
                topic_id=topic.topic_id,
                partitions=[self.partition_pb((name, p)) for p in sorted(topic.assignment)],
                configs=topic.configs,
            )
            for name, topic in sorted(self.state.topics.items())
        ]
        me = metadata_pb2.BrokerInfo(broker_id=self.controller_id, host=self.host, port=self.port)
        for bid, b in self.state.brokers.items():
            self.channels.send(
                bid,
                broker_pb2.UpdateMetadataRequest(
                    controller_id=self.controller_id,
                    controller_epoch=self.epoch,
                    broker_epoch=b.epoch,
                    cluster_id=self.state.cluster_id,
                    brokers=brokers,
                    topics=topics,
                    controller=me,
                    coordinators=self.coordinators,
                ),
            )

    def send_stop_replica(
        self, keys: Iterable[tuple[PartitionKey, list[int]]], delete: bool
    ) -> None:
        """StopReplica to each live broker holding one of ``keys`` (key, replicas)."""
        assert self.state is not None and self.epoch is not None
        per_broker: dict[int, list[broker_pb2.StopReplicaPartition]] = {}
        for (topic, p), replicas in keys:
            for bid in replicas:
                if bid in self.state.brokers:
                    per_broker.setdefault(bid, []).append(
                        broker_pb2.StopReplicaPartition(topic=topic, partition=p, delete=delete)
                    )
        for bid, items in per_broker.items():
            self.channels.send(
                bid,
                broker_pb2.StopReplicaRequest(
                    controller_id=self.controller_id,
                    controller_epoch=self.epoch,
                    broker_epoch=self.state.brokers[bid].epoch,
                    partitions=items,
                ),
            )


def broker_info(b: st.Broker) -> metadata_pb2.BrokerInfo:
    return metadata_pb2.BrokerInfo(
        broker_id=b.broker_id,
        host=b.host,
        port=b.port,
        rack=b.rack,
        broker_epoch=b.epoch,
        metrics_url=b.metrics_url,
    )
