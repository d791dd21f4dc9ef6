"""The broker's view of the cluster, replaced wholesale by each UpdateMetadata.

The controller sends the full snapshot (brokers, live group coordinators, every topic with
its partitions' leader, ISR and epochs, the controller and the cluster id); this cache swaps it
in one assignment, so a reader never sees half of an update. Owned by the event loop:
``update`` is called only by the UpdateMetadata handler (after controller-epoch fencing),
readers are handlers on the same loop.

Until the first snapshot arrives the broker knows nothing of the cluster: :meth:`describe`
raises ``BROKER_NOT_AVAILABLE`` (a retriable error: a client asks another broker) rather than
answer "no topics", and :attr:`received` is unset (the broker's health stays NOT_SERVING until
it is, so Kubernetes routes no client to it and a rolling restart waits for it). A Kafka broker
likewise serves clients only once it has caught up with the cluster's metadata.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from headwater.errors import BrokerNotAvailableError, UnknownTopicOrPartitionError
from headwater.v1 import broker_pb2, metadata_pb2
from headwater.v1.errors_pb2 import ErrorCode


@dataclass(frozen=True)
class _Snapshot:
    cluster_id: str = ""
    controller_id: int = -1
    controller: metadata_pb2.BrokerInfo | None = None
    brokers: tuple[metadata_pb2.BrokerInfo, ...] = ()
    topics: dict[str, metadata_pb2.TopicMetadata] = field(default_factory=dict)
    coordinators: tuple[metadata_pb2.BrokerInfo, ...] = ()


class MetadataCache:
    """Topics, partition states, brokers, controller id and cluster id as last pushed."""

    def __init__(self) -> None:
        self._snap = _Snapshot()
        #: set by the first :meth:`update` (the broker has the cluster's metadata)
        self.received = asyncio.Event()

    def update(self, request: broker_pb2.UpdateMetadataRequest) -> None:
        """Replace the whole view with the request's snapshot."""
        controller = None
        if request.HasField("controller"):
            controller = metadata_pb2.BrokerInfo()
            controller.CopyFrom(request.controller)
        topics: dict[str, metadata_pb2.TopicMetadata] = {}
        for t in request.topics:
            copy = metadata_pb2.TopicMetadata()
            copy.CopyFrom(t)
            topics[t.name] = copy
        brokers = []
        for b in request.brokers:
            copy_b = metadata_pb2.BrokerInfo()
            copy_b.CopyFrom(b)
            brokers.append(copy_b)
        coordinators = []
        for c in request.coordinators:
            copy_c = metadata_pb2.BrokerInfo()
            copy_c.CopyFrom(c)
            coordinators.append(copy_c)
        self._snap = _Snapshot(
            cluster_id=request.cluster_id,
            controller_id=request.controller_id,
            controller=controller,
            brokers=tuple(brokers),
            topics=topics,
            coordinators=tuple(coordinators),
        )
        self.received.set()

    @property
    def cluster_id(self) -> str:
        return self._snap.cluster_id

    @property
    def controller(self) -> metadata_pb2.BrokerInfo | None:
        """The active controller's endpoint as last pushed (None when unknown)."""
        return self._snap.controller

    def broker(self, broker_id: int) -> metadata_pb2.BrokerInfo | None:
        """A live broker as last pushed (address, rack, epoch), or None."""
        for b in self._snap.brokers:
            if b.broker_id == broker_id:
                return b
        return None

    def topic(self, name: str) -> metadata_pb2.TopicMetadata | None:
        return self._snap.topics.get(name)

    def partition_count(self, topic: str) -> int:
        """Number of partitions of ``topic``; raises UnknownTopicOrPartitionError."""
        t = self._snap.topics.get(topic)
        if t is None or not t.partitions:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        return len(t.partitions)

    def has_partition(self, topic: str, partition: int) -> bool:
        t = self._snap.topics.get(topic)
        return t is not None and any(p.partition == partition for p in t.partitions)

    def describe(self, topics: Iterable[str] = ()) -> metadata_pb2.MetadataResponse:
        """The Metadata answer: all topics when ``topics`` is empty, else the ones asked for.

        A requested topic that is not known gets ``UNKNOWN_TOPIC_OR_PARTITION`` in its
        ``TopicMetadata.error_code`` (the request as a whole succeeds).

        Clients see what a Kafka client sees: no broker epochs, no controller epoch and no
        partition epoch (the fencing values of the control RPCs, which only the controller
        sends; the broker keeps them in this cache for its own use, :meth:`broker`/:meth:`topic`).

        Raises BrokerNotAvailableError before the first snapshot (module doc).
        """
        if not self.received.is_set():
            raise BrokerNotAvailableError(
                "this broker has not received the cluster's metadata from the controller yet"
            )
        snap = self._snap
        wanted = list(dict.fromkeys(topics))
        resp = metadata_pb2.MetadataResponse(
            controller_id=snap.controller_id,
            cluster_id=snap.cluster_id,
            brokers=snap.brokers,
            coordinators=snap.coordinators,
        )
        if snap.controller is not None:
            resp.controller.CopyFrom(snap.controller)
        if not wanted:
            resp.topics.extend(snap.topics[name] for name in sorted(snap.topics))
            return _public(resp)
        for name in wanted:
            t = snap.topics.get(name)
            if t is None:
                resp.topics.append(
                    metadata_pb2.TopicMetadata(
                        name=name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                )
            else:
                resp.topics.append(t)
        return _public(resp)


def _public(resp: metadata_pb2.MetadataResponse) -> metadata_pb2.MetadataResponse:
    """Clear the fencing epochs from a Metadata answer (its messages are copies)."""
    infos = [*resp.brokers, *resp.coordinators]
    if resp.HasField("controller"):
        infos.append(resp.controller)
    for b in infos:
        b.ClearField("broker_epoch")
    for t in resp.topics:
        for p in t.partitions:
            p.ClearField("controller_epoch")
            p.ClearField("partition_epoch")
    return resp
