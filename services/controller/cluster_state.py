"""The active controller's in-memory cluster state and the typed changes that alone modify it.

:class:`ClusterState` has one writer, :meth:`ClusterState.apply`, taking one change record
(:data:`Change`, frozen dataclasses named after what happened). Both ways the state is built
use it (as Kafka's controller and group coordinator replay their records):

* **load** — :func:`load` reads etcd's keys and turns them into records
  (:func:`snapshot_changes`, pure), then :meth:`ClusterState.replay` applies them in order;
* **run time** — a command or event handler writes etcd first (a fenced transaction
  conditioned on what it read, :mod:`services.controller.state`) and, once the write has
  succeeded, applies the record describing what it wrote; broker registrations come from the
  broker watch (``BrokerPut`` / ``BrokerGone`` events) and are applied as they arrive.

A record mirrors one etcd key's change: the cluster id (:class:`ClusterIdSet`), a broker
registration (:class:`BrokerRegistered`, :class:`BrokerUnregistered`), a topic key
(:class:`TopicCreated`, :class:`TopicChanged` for new replica lists or configs,
:class:`TopicDeleted`, which also drops the topic's partition states as its transaction
deletes their keys) and a partition state key (:class:`PartitionChanged`: leader, ISR, epochs,
reassignment sets and the key's mod revision). A record that does not fit the state (a topic
created twice, a change to an unknown topic or broker) raises :class:`InconsistentChange` and
changes nothing; the run-time paths check before writing, so it signals a bug.

Readers get read-only views (``brokers``, ``topics``, ``partitions`` are ``Mapping`` proxies of
the live dicts). Owned by the controller's event-loop task only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from headwater.platform import etcd as hetcd
from headwater.platform.cluster_layout import (
    BROKERS_PREFIX,
    CLUSTER_ID_KEY,
    PARTITIONS_PREFIX,
    TOPICS_PREFIX,
    Topic,
)
from services.controller.state import Broker, PartitionState, decode_broker

log = logging.getLogger(__name__)
PartitionKey = tuple[str, int]


class InconsistentChange(ValueError):
    """A change record that does not fit the current state (nothing was changed)."""


@dataclass(frozen=True)
class ClusterIdSet:
    """The cluster id key holds ``cluster_id``."""

    cluster_id: str


@dataclass(frozen=True)
class BrokerRegistered:
    """A broker's registration key was written (a new broker, or a new incarnation)."""

    broker: Broker


@dataclass(frozen=True)
class BrokerUnregistered:
    """A known broker's registration key is gone (lease expired or revoked)."""

    broker_id: int


@dataclass(frozen=True)
class TopicCreated:
    """A topic key was created (its partition states follow as :class:`PartitionChanged`)."""

    topic: Topic


@dataclass(frozen=True)
class TopicChanged:
    """An existing topic key was replaced (partitions added, replicas reassigned, configs)."""

    topic: Topic


@dataclass(frozen=True)
class TopicDeleted:
    """A topic key and its partition state keys were deleted."""

    name: str


@dataclass(frozen=True)
class PartitionChanged:
    """A partition state key of a known topic was written."""

    topic: str
    partition: int
    state: PartitionState

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.partition)


Change = (
    ClusterIdSet
    | BrokerRegistered
    | BrokerUnregistered
    | TopicCreated
    | TopicChanged
    | TopicDeleted
    | PartitionChanged
)


class ClusterState:
    """What the active controller knows; changed only by :meth:`apply` (module doc)."""

    __slots__ = (
        "_brokers",
        "_cluster_id",
        "_partitions",
        "_topics",
        "brokers",
        "partitions",
        "topics",
    )

    def __init__(self) -> None:
        self._cluster_id = ""
        self._brokers: dict[int, Broker] = {}
        self._topics: dict[str, Topic] = {}
        self._partitions: dict[PartitionKey, PartitionState] = {}
        #: live brokers by id (read-only view)
        self.brokers: Mapping[int, Broker] = MappingProxyType(self._brokers)
        #: topics by name (read-only view)
        self.topics: Mapping[str, Topic] = MappingProxyType(self._topics)
        #: partition states by (topic, partition) (read-only view)
        self.partitions: Mapping[PartitionKey, PartitionState] = MappingProxyType(self._partitions)

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @classmethod
    def replay(cls, changes: Iterable[Change]) -> ClusterState:
        """A new state with ``changes`` applied in order."""
        state = cls()
        for change in changes:
            state.apply(change)
        return state

    def apply(self, change: Change) -> None:
        """Change the state by one record (module doc); InconsistentChange, changing nothing,
        when the record does not fit."""
        match change:
            case ClusterIdSet(cluster_id):
                self._cluster_id = cluster_id
            case BrokerRegistered(broker):
                self._brokers[broker.broker_id] = broker
            case BrokerUnregistered(broker_id):
                if self._brokers.pop(broker_id, None) is None:
                    raise InconsistentChange(f"broker {broker_id} is not registered")
            case TopicCreated(topic):
                if topic.name in self._topics:
                    raise InconsistentChange(f"topic {topic.name!r} already exists")
                self._topics[topic.name] = topic
            case TopicChanged(topic):
                self._known_topic(topic.name)
                self._topics[topic.name] = topic
            case TopicDeleted(name):
                topic = self._known_topic(name)
                del self._topics[name]
                for p in topic.assignment:
                    self._partitions.pop((name, p), None)
            case PartitionChanged(topic_name, partition, state):
                self._known_topic(topic_name)
                self._partitions[(topic_name, partition)] = state

    def _known_topic(self, name: str) -> Topic:
        topic = self._topics.get(name)
        if topic is None:
            raise InconsistentChange(f"topic {name!r} does not exist")
        return topic

    def partitions_of(self, topic: str) -> list[int]:
        return sorted(self._topics[topic].assignment) if topic in self._topics else []

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClusterState):
            return NotImplemented
        return (self._cluster_id, self._brokers, self._topics, self._partitions) == (
            other._cluster_id,
            other._brokers,
            other._topics,
            other._partitions,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"ClusterState(cluster_id={self._cluster_id!r}, brokers={self._brokers!r},"
            f" topics={self._topics!r}, partitions={self._partitions!r})"
        )


def snapshot_changes(
    cluster_id: str,
    brokers: Sequence[hetcd.KeyValue],
    topics: Sequence[hetcd.KeyValue],
    partitions: Sequence[hetcd.KeyValue],
) -> list[Change]:
    """The records that rebuild the state from etcd's keys (read at one point each).

    Malformed broker registrations and topics are skipped (logged); partition keys of unknown
    topics are ignored; a malformed partition state becomes an offline one (leader -1, empty
    ISR: never a leader guessed from a damaged record) until an operator repairs the key.
    """
    out: list[Change] = [ClusterIdSet(cluster_id)]
    for kv in brokers:
        b = decode_broker(kv.key, kv.value, kv.meta.create_revision)
        if b is not None:
            out.append(BrokerRegistered(b))
    names: set[str] = set()
    for kv in topics:
        name = kv.key[len(TOPICS_PREFIX) :]
        try:
            out.append(TopicCreated(Topic.decode(name, kv.value, kv.meta.mod_revision)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.error("ignoring malformed topic %s: %r", kv.key, exc)
            continue
        names.add(name)
    for kv in partitions:
        topic, _, p = kv.key[len(PARTITIONS_PREFIX) :].rpartition("/")
        if topic not in names or not p.isdigit():
            continue
        try:
            state = PartitionState.decode(kv.value, kv.meta.mod_revision)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("malformed partition state %s (partition offline): %r", kv.key, exc)
            state = PartitionState(-1, 0, (), 0, 0, mod_revision=kv.meta.mod_revision)
        out.append(PartitionChanged(topic, int(p), state))
    return out


async def load(etcd: hetcd.Etcd) -> tuple[ClusterState, int]:
    """The state replayed from etcd's brokers, topics and partition states; also the revision
    of the broker snapshot (watch brokers from ``revision + 1``)."""
    got = await etcd.get(CLUSTER_ID_KEY)
    brokers = await etcd.get_prefix(BROKERS_PREFIX)
    topics = await etcd.get_prefix(TOPICS_PREFIX)
    partitions = await etcd.get_prefix(PARTITIONS_PREFIX)
    cluster_id = got[0].decode() if got else ""
    changes = snapshot_changes(cluster_id, brokers.items, topics.items, partitions.items)
    return ClusterState.replay(changes), brokers.revision
