"""Offline replicas: the partitions a live broker refused to host (issue 17 item 4).

A broker answers a LeaderAndIsr partition with ``KAFKA_STORAGE_ERROR`` when it cannot host it
(past its open-file budget, ``services/broker/descriptors.py``; a failing log directory). That
replica does not exist, so the controller must neither keep it as leader nor count it in the
ISR: Kafka's offline replica (KIP-112). :class:`OfflineReplicas` is the controller's record of
them, kept on the event-loop task:

* a refusal marks ``(topic, partition)`` offline on the broker, for that topic id (a topic
  deleted and created again under the same name is a new partition) and that broker epoch;
* a later LeaderAndIsr the broker answers without error for the partition (it found room)
  clears the mark; the loop's queue keeps each broker's answers in order, and an answer
  without refusals is queued while the broker has marks *or refusals queued but not yet
  handled* (``ControllerLoop._leader_and_isr_answered``), so a success that arrives before
  the earlier refusal is handled still clears it;
* a broker that goes, or registers again with a new epoch, loses its marks (a restarted broker
  tries every assigned partition again); a new controller starts with none and learns them
  from the answers to the LeaderAndIsr it sends every broker on activation.

Elections (:func:`services.controller.leadership.elect`, ``offline=``) never pick an offline
replica, drop it from the ISR, and move leadership off it; a leader's AlterPartition adding it
back to the ISR is refused ``INELIGIBLE_REPLICA``
(:func:`services.controller.leadership.check_isr_change`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

PartitionKey = tuple[str, int]


class OfflineReplicas:
    """Which live brokers' replicas of which partitions are offline (module doc)."""

    def __init__(self) -> None:
        #: key -> {broker id: the topic id the refusal was for}
        self._by_key: dict[PartitionKey, dict[int, str]] = {}
        #: the registration epoch each broker's marks belong to
        self._epochs: dict[int, int] = {}

    def __len__(self) -> int:
        return sum(len(m) for m in self._by_key.values())

    def has(self, broker_id: int) -> bool:
        """Whether marks of ``broker_id`` may exist (cheap; may say yes after they cleared)."""
        return broker_id in self._epochs

    def mark(
        self, broker_id: int, epoch: int, refused: Mapping[PartitionKey, str]
    ) -> list[PartitionKey]:
        """Mark ``refused`` (key -> topic id) offline on the broker registration; returns the
        keys not already marked so."""
        if self._epochs.get(broker_id, epoch) != epoch:
            self.forget(broker_id)
        if not refused:
            return []
        self._epochs[broker_id] = epoch
        new = []
        for key, topic_id in refused.items():
            marks = self._by_key.setdefault(key, {})
            if marks.get(broker_id) != topic_id:
                marks[broker_id] = topic_id
                new.append(key)
        return new

    def clear(
        self, broker_id: int, epoch: int, hosted: Iterable[PartitionKey]
    ) -> list[PartitionKey]:
        """The broker registration now hosts ``hosted``; returns the keys that were offline."""
        if self._epochs.get(broker_id) != epoch:
            return []
        back = []
        for key in hosted:
            marks = self._by_key.get(key)
            if marks is not None and marks.pop(broker_id, None) is not None:
                back.append(key)
                if not marks:
                    del self._by_key[key]
        return back

    def forget(self, broker_id: int) -> None:
        """The broker went or registered again: its marks no longer hold."""
        if self._epochs.pop(broker_id, None) is None:
            return
        for key in list(self._by_key):
            marks = self._by_key[key]
            marks.pop(broker_id, None)
            if not marks:
                del self._by_key[key]

    def brokers(self, key: PartitionKey, topic_id: str) -> frozenset[int]:
        """The brokers whose replica of ``key`` (of topic ``topic_id``) is offline."""
        marks = self._by_key.get(key)
        if not marks:
            return frozenset()
        return frozenset(b for b, t in marks.items() if t == topic_id)
