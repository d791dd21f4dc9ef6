"""A consumer group's state and how records change it (pure: no I/O, no clock of its own).

State has two parts:

* **durable** — generation, protocol type and name, leader, members (id, instance id, client
  id, timeouts, protocols with their metadata, assignment), committed and pending offsets.
  Changed ONLY by :meth:`GroupTable.apply` from the typed records of the offsets topic
  (:mod:`records`) — at load (replay of the partition) and at run time (the records handlers
  returned, once read back from the log) alike — so a coordinator that takes a partition over
  rebuilds exactly this;
* **volatile** — what a live coordinator tracks between records: a rebalance in progress
  (PreparingRebalance, its deadline, which members rejoined), members that joined but are
  not in a generation yet, pending dynamic member ids (MEMBER_ID_REQUIRED), and each
  member's last heartbeat. Lost on failover by design: members learn it again (heartbeats
  reset the session timers; an interrupted rebalance restarts when they rejoin).

Lifecycle (:class:`GroupState`)::

    Empty --join--> PreparingRebalance --all rejoined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable | CompletingRebalance --join / leave / expiry / subscription change--> Preparing..
    PreparingRebalance --nobody left--> Empty;  Empty, no offsets (expiry) / delete --> Dead

After applying a group record the state is Empty (no members), CompletingRebalance (members,
no assignment yet) or Stable (assigned) — :func:`state_from_durable`.

Owned by one asyncio task per offsets-topic partition (:mod:`runtime`).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import assert_never

from services.coordinator import records as rec
from services.coordinator.records import Offset, PendingOffset

__all__ = ["Group", "GroupState", "GroupTable", "Member", "Offset", "PendingOffset"]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    instance_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # volatile
    last_seen_ms: int = 0
    rejoined: bool = False

    def durable(self) -> rec.MemberValue:
        return rec.MemberValue(
            member_id=self.member_id,
            instance_id=self.instance_id,
            client_id=self.client_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            protocols=tuple(self.protocols),
            assignment=self.assignment,
        )

    @staticmethod
    def from_durable(v: rec.MemberValue, last_seen_ms: int) -> Member:
        return Member(
            member_id=v.member_id,
            instance_id=v.instance_id,
            client_id=v.client_id,
            session_timeout_ms=v.session_timeout_ms,
            rebalance_timeout_ms=v.rebalance_timeout_ms,
            protocols=list(v.protocols),
            assignment=v.assignment,
            last_seen_ms=last_seen_ms,
        )

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol: str = ""
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[tuple[str, int], Offset] = field(default_factory=dict)
    has_metadata: bool = False  # a group record exists (not only offsets)
    #: (topic, partition, producer id) -> pending transactional offset
    pending: dict[tuple[str, int, int], PendingOffset] = field(default_factory=dict)
    # volatile
    rebalance_deadline_ms: int = 0
    rebalance_started_ms: int = 0
    pending_ids: set[str] = field(default_factory=set)

    def instance_member(self, instance_id: str) -> Member | None:
        if not instance_id:
            return None
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def metadata_record(
        self,
        epoch: int,
        *,
        generation: int,
        protocol: str,
        leader: str,
        members: list[Member],
        assigned: bool,
    ) -> rec.Record:
        """The group metadata record of this group as given (written under ``epoch``)."""
        value = rec.GroupValue(
            generation=generation,
            protocol_type=self.protocol_type,
            protocol=protocol,
            leader=leader,
            assigned=assigned,
            members=tuple(m.durable() for m in members),
        )
        return rec.Record(rec.GroupMetadata(self.group_id, value), epoch)

    def durable_view(self) -> dict[str, object]:
        """What replay must reproduce (used by the determinism tests)."""
        return {
            "generation": self.generation,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "leader": self.leader,
            "members": sorted(
                json.dumps(m.durable().fields(), sort_keys=True) for m in self.members.values()
            ),
            "offsets": dict(sorted(self.offsets.items())),
            "pending": dict(sorted(self.pending.items())),
            "has_metadata": self.has_metadata,
            "assigned": self.state is GroupState.STABLE,
        }


def state_from_durable(group: Group, assigned: bool) -> GroupState:
    if not group.members:
        return GroupState.EMPTY
    return GroupState.STABLE if assigned else GroupState.COMPLETING_REBALANCE


@dataclass
class GroupTable:
    """All groups of one offsets-topic partition, plus the fencing epoch seen in the log (the
    :class:`~services.coordinator.log_runtime.ReplayTable` contract)."""

    groups: dict[str, Group] = field(default_factory=dict)
    marker_epoch: int = -1
    marker_owner: int = -1

    def get(self, group_id: str) -> Group | None:
        g = self.groups.get(group_id)
        return None if g is None or g.state is GroupState.DEAD else g

    @staticmethod
    def decode(key: bytes | None, value: bytes | None, epoch: int) -> rec.Record:
        """A record read from the offsets topic, typed (raises records.BadRecordError)."""
        return rec.Record(rec.decode(key, value), epoch)

    def current_record(self, key: bytes, epoch: int) -> rec.Record:
        """The record that restates this table's valid value for ``key`` (a tombstone when
        there is none), written under ``epoch``: the owner's repair of a key whose latest
        record in the log is a fenced late write (see records.py)."""
        if key.startswith(rec.MARKER_PREFIX):
            return rec.marker(self.marker_epoch, self.marker_owner)
        m = rec.decode(key, None)  # the key's tombstone
        if isinstance(m, rec.EpochMarker):
            raise rec.BadRecordError(f"bad marker key {key!r}")
        g = self.get(m.group_id)
        match m:
            case rec.OffsetCommit():
                o = None if g is None else g.offsets.get((m.topic, m.partition))
                return rec.Record(rec.OffsetCommit(m.group_id, m.topic, m.partition, o), epoch)
            case rec.PendingOffsetCommit():
                po = None if g is None else g.pending.get((m.topic, m.partition, m.producer_id))
                return rec.Record(
                    rec.PendingOffsetCommit(m.group_id, m.topic, m.partition, m.producer_id, po),
                    epoch,
                )
            case rec.GroupMetadata():
                if g is None or not g.has_metadata:
                    return rec.Record(m, epoch)
                return g.metadata_record(
                    epoch,
                    generation=g.generation,
                    protocol=g.protocol,
                    leader=g.leader,
                    members=list(g.members.values()),
                    assigned=g.state is GroupState.STABLE,
                )
            case _:
                assert_never(m)

    def replay(self, key: bytes | None, value: bytes | None, epoch: int, now_ms: int) -> bool:
        """:meth:`apply` of the record with this key, value and epoch header."""
        return self.apply(self.decode(key, value, epoch), now_ms)

    def apply(self, record: rec.Record, now_ms: int) -> bool:
        """Apply one record; returns False when it was ignored (fenced: an epoch below the
        highest marker seen). The only way durable group state changes: used by the load
        replay and, for the records handlers return, once they are read back from the log.
        ``now_ms`` starts the session timer of a member not seen before."""
        if record.epoch < self.marker_epoch:
            return False
        m = record.message
        match m:
            case rec.EpochMarker():
                self.marker_epoch, self.marker_owner = m.epoch, m.coordinator_id
            case rec.OffsetCommit():
                self._apply_offset(m)
            case rec.PendingOffsetCommit():
                self._apply_pending(m)
            case rec.GroupMetadata():
                self._apply_group(m, now_ms)
            case _:
                raise rec.BadRecordError(f"not an offsets-topic record: {m!r}")
        return True

    def _live(self, group_id: str) -> Group:
        """The group (a new one when it is absent or Dead)."""
        g = self.groups.get(group_id)
        if g is None or g.state is GroupState.DEAD:
            g = self.groups[group_id] = Group(group_id)
        return g

    def _apply_offset(self, m: rec.OffsetCommit) -> None:
        if m.offset is None:
            g = self.groups.get(m.group_id)
            if g is not None:
                g.offsets.pop((m.topic, m.partition), None)
                self._drop_if_dead(g)
            return
        self._live(m.group_id).offsets[(m.topic, m.partition)] = m.offset

    def _apply_pending(self, m: rec.PendingOffsetCommit) -> None:
        pk = (m.topic, m.partition, m.producer_id)
        if m.pending is None:
            g = self.groups.get(m.group_id)
            if g is not None:
                g.pending.pop(pk, None)
                self._drop_if_dead(g)
            return
        self._live(m.group_id).pending[pk] = m.pending

    def _apply_group(self, m: rec.GroupMetadata, now_ms: int) -> None:
        v = m.group
        if v is None:
            g = self.groups.get(m.group_id)
            if g is not None:
                g.members.clear()
                g.has_metadata = False
                g.generation = 0
                g.protocol = g.leader = g.protocol_type = ""
                g.state = GroupState.EMPTY
                self._drop_if_dead(g)
            return
        g = self._live(m.group_id)
        g.has_metadata = True
        g.generation = v.generation
        g.protocol_type = v.protocol_type
        g.protocol = v.protocol
        g.leader = v.leader
        old = g.members
        g.members = {}
        for mv in v.members:
            prev = old.get(mv.member_id)
            seen = prev.last_seen_ms if prev is not None else now_ms
            g.members[mv.member_id] = Member.from_durable(mv, seen)
        g.state = state_from_durable(g, v.assigned)
        g.rebalance_deadline_ms = 0
        for mm in g.members.values():
            mm.rejoined = False

    def _drop_if_dead(self, g: Group) -> None:
        if not g.has_metadata and not g.offsets and not g.members and not g.pending:
            g.state = GroupState.DEAD
            del self.groups[g.group_id]

    def durable_view(self) -> dict[str, object]:
        return {gid: g.durable_view() for gid, g in sorted(self.groups.items())}
