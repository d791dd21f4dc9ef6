"""Partition leadership under the live brokers: the part of the controller's event loop that
elects, writes and adopts partition states (a mixin of
:class:`services.controller.events.ControllerLoop`; called only on the event-loop task).

Decisions are :mod:`services.controller.leadership`'s: when a leader's broker is gone, a new
leader is chosen from the live ISR members (preferred replica first; or, with
``unclean.leader.election.enable``, any live replica); with none, leader = -1 and the ISR is
kept so its last member is elected when it returns. Whether unclean election is enabled is the
topic's effective ``unclean.leader.election.enable``, resolved like every topic setting
(:func:`headwater.config.resolve_topic_config`): the topic override, else the cluster-wide
default (``configs alter --entity-type brokers --entity-default``), else the built-in default
(false). A dead follower leaves the ISR. Brokers in controlled shutdown (``shutting_down``)
are never elected, and neither are offline replicas (a broker refused to host the partition:
:mod:`services.controller.offline_replicas`); those also leave the ISR and give up leading.
Every leader change bumps ``leader_epoch``; every change bumps
``partition_epoch``.

:meth:`PartitionLeadership.write` is the one way a changed partition state is adopted: fenced
CAS transactions (controller epoch and each key's mod revision as read, batched up to
``state.TXN_CHUNK`` keys), then, for each key written, a
:class:`~services.controller.cluster_state.PartitionChanged` record applied to the state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from headwater import config as hconfig
from headwater import errors
from headwater.platform import etcd as hetcd
from services.controller import cluster_state as cs
from services.controller import metrics
from services.controller import state as st
from services.controller.leadership import elect
from services.controller.offline_replicas import OfflineReplicas
from services.controller.requests import BrokerRequests

log = logging.getLogger(__name__)
PartitionKey = tuple[str, int]


class PartitionLeadership(BrokerRequests):
    etcd: hetcd.Etcd
    #: live brokers in controlled shutdown (never elected)
    shutting_down: set[int]
    #: the cluster-wide defaults of topic settings without an override
    topic_defaults: dict[str, str]
    #: replicas live brokers refused to host (never elected, out of the ISR)
    offline: OfflineReplicas

    def all_keys(self) -> list[PartitionKey]:
        assert self.state is not None
        return [(t, p) for t, topic in self.state.topics.items() for p in topic.assignment]

    def keys_on(self, broker_id: int) -> list[PartitionKey]:
        assert self.state is not None
        return [
            (name, p)
            for name, topic in self.state.topics.items()
            for p, replicas in topic.assignment.items()
            if broker_id in replicas
        ]

    def offline_replicas(self, key: PartitionKey) -> frozenset[int]:
        """The brokers whose replica of ``key`` is offline (never to be elected)."""
        assert self.state is not None
        topic = self.state.topics.get(key[0])
        return self.offline.brokers(key, topic.topic_id) if topic is not None else frozenset()

    def reconcile(self, keys: Iterable[PartitionKey]) -> dict[PartitionKey, st.PartitionState]:
        """New states for partitions whose leadership must change given the live brokers."""
        assert self.state is not None and self.epoch is not None
        out: dict[PartitionKey, st.PartitionState] = {}
        unclean: dict[str, bool] = {}
        for key in keys:
            topic = self.state.topics[key[0]]
            if key[0] not in unclean:
                unclean[key[0]] = self.unclean_enabled(key[0])
            new = elect(
                topic.assignment[key[1]],
                self.state.partitions.get(key),
                set(self.state.brokers),
                self.epoch,
                unclean=unclean[key[0]],
                shutting=self.shutting_down,
                offline=self.offline_replicas(key),
            )
            if new is not None:
                out[key] = new
        return out

    def unclean_enabled(self, topic: str) -> bool:
        """The topic's effective ``unclean.leader.election.enable`` (module doc)."""
        assert self.state is not None
        t = self.state.topics.get(topic)
        if t is None:
            return False
        try:
            config = hconfig.resolve_topic_config(t.configs, self.topic_defaults)
        except errors.HeadwaterError as exc:  # written by hand: the controller validates
            log.error("topic %s: invalid configs (%s); unclean election stays off", topic, exc)
            return False
        return config.unclean_leader_election_enable

    async def reelect(self, keys: Iterable[PartitionKey]) -> list[PartitionKey]:
        """Elect again the partitions of ``keys`` whose leader must change under the current
        brokers and configs (e.g. an offline partition once unclean election is enabled);
        brokers are told. Returns the keys changed."""
        changed = await self.write(self.reconcile(keys))
        if changed:
            self.send_leader_and_isr(changed)
            self.send_update_metadata()
        return changed

    async def write(self, changes: dict[PartitionKey, st.PartitionState]) -> list[PartitionKey]:
        """Persist changed partition states (fenced CAS transactions of up to
        ``state.TXN_CHUNK`` keys, any topics) and adopt them; returns the keys written."""
        assert self.state is not None and self.epoch is not None
        if not changes:
            return []
        written = await st.write_states(self.etcd, self.epoch, changes)
        for (topic, p), s in written.items():
            metrics.observe_transition(self.state.partitions.get((topic, p)), s)
            self.state.apply(cs.PartitionChanged(topic, p, s))
        return sorted(changes)
