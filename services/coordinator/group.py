"""A consumer group's state and how records change it (pure: no I/O, no clock of its own).

State has two parts:

* **durable** — generation, protocol type and name, leader, members (id, instance id, client
  id, timeouts, protocols with their metadata, assignment), committed offsets. Changed ONLY by
  :meth:`GroupTable.replay` from records of the offsets topic (:mod:`records`), so a
  coordinator that takes a partition over rebuilds exactly this by replaying the partition;
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

After replaying a group record the state is Empty (no members), CompletingRebalance (members,
no assignment yet) or Stable (assigned) — :func:`state_from_durable`.

Owned by one asyncio task per offsets-topic partition (:mod:`partition`).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from services.coordinator import records as rec


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

    def durable(self) -> dict[str, object]:
        return {
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "client_id": self.client_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocols": [[n, rec.b64(m)] for n, m in self.protocols],
            "assignment": rec.b64(self.assignment),
        }

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(frozen=True)
class Offset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int

    def value(self, **extra: int) -> bytes:
        """The JSON value of an offset record (``extra``: "producer_epoch" when pending)."""
        return json.dumps(
            {
                "offset": self.offset,
                "leader_epoch": self.leader_epoch,
                "metadata": self.metadata,
                "commit_timestamp": self.commit_timestamp,
                **extra,
            }
        ).encode()


@dataclass(frozen=True)
class PendingOffset:
    """A transactional offset awaiting its transaction's outcome (records.py)."""

    offset: Offset
    producer_epoch: int


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

    def durable_value(
        self,
        *,
        generation: int,
        protocol: str,
        leader: str,
        members: list[Member],
        assigned: bool,
    ) -> bytes:
        return json.dumps(
            {
                "generation": generation,
                "protocol_type": self.protocol_type,
                "protocol": protocol,
                "leader": leader,
                "assigned": assigned,
                "members": [m.durable() for m in members],
            },
            sort_keys=True,
        ).encode()

    def durable_view(self) -> dict[str, object]:
        """What replay must reproduce (used by the determinism tests)."""
        return {
            "generation": self.generation,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "leader": self.leader,
            "members": sorted(
                json.dumps(m.durable(), sort_keys=True) for m in self.members.values()
            ),
            "offsets": dict(sorted(self.offsets.items())),
            "pending": dict(sorted(self.pending.items())),
            "has_metadata": self.has_metadata,
            "assigned": self.state is GroupState.STABLE,
        }


def _offset(v: dict[str, object]) -> Offset:
    return Offset(
        int(v["offset"]),  # type: ignore[call-overload]
        int(v["leader_epoch"]),  # type: ignore[call-overload]
        str(v["metadata"]),
        int(v["commit_timestamp"]),  # type: ignore[call-overload]
    )


def state_from_durable(group: Group, assigned: bool) -> GroupState:
    if not group.members:
        return GroupState.EMPTY
    return GroupState.STABLE if assigned else GroupState.COMPLETING_REBALANCE


@dataclass
class GroupTable:
    """All groups of one offsets-topic partition, plus the fencing epoch seen in the log."""

    groups: dict[str, Group] = field(default_factory=dict)
    marker_epoch: int = -1
    marker_owner: int = -1

    def get(self, group_id: str) -> Group | None:
        g = self.groups.get(group_id)
        return None if g is None or g.state is GroupState.DEAD else g

    def current_record(self, key: bytes, epoch: int) -> rec.Record:
        """The record that restates this table's valid value for ``key`` (a tombstone when
        there is none), written under ``epoch``: the owner's repair of a key whose latest
        record in the log is a fenced late write (see records.py)."""
        d = rec.decode(key, None, epoch)
        if d.kind == "marker":
            return rec.marker(self.marker_epoch, self.marker_owner)
        g = self.get(d.group)
        if d.kind == "offset":
            o = None if g is None else g.offsets.get((d.topic, d.partition))
            if o is None:
                return rec.Record(key, None, epoch)
            return rec.Record(key, o.value(), epoch)
        if d.kind == "pending":
            po = None if g is None else g.pending.get((d.topic, d.partition, d.producer_id))
            if po is None:
                return rec.Record(key, None, epoch)
            return rec.Record(key, po.offset.value(producer_epoch=po.producer_epoch), epoch)
        if g is None or not g.has_metadata:
            return rec.Record(key, None, epoch)
        value = g.durable_value(
            generation=g.generation,
            protocol=g.protocol,
            leader=g.leader,
            members=list(g.members.values()),
            assigned=g.state is GroupState.STABLE,
        )
        return rec.Record(key, value, epoch)

    def replay(self, key: bytes | None, value: bytes | None, epoch: int, now_ms: int) -> bool:
        """Apply one record; returns False when it was ignored (fenced: an epoch below the
        highest marker seen). Raises records.BadRecordError for unparseable records."""
        d = rec.decode(key, value, epoch)
        if epoch < self.marker_epoch:
            return False
        if d.kind == "marker":
            assert d.value is not None
            self.marker_epoch = int(d.value["epoch"])  # type: ignore[call-overload]
            self.marker_owner = int(d.value["coordinator_id"])  # type: ignore[call-overload]
            return True
        if d.kind == "offset":
            g = self.groups.get(d.group)
            if d.value is None:
                if g is not None:
                    g.offsets.pop((d.topic, d.partition), None)
                    self._drop_if_dead(g)
                return True
            if g is None or g.state is GroupState.DEAD:
                g = self.groups[d.group] = Group(d.group)
            v = d.value
            g.offsets[(d.topic, d.partition)] = _offset(v)
            return True
        if d.kind == "pending":
            g = self.groups.get(d.group)
            pk = (d.topic, d.partition, d.producer_id)
            if d.value is None:
                if g is not None:
                    g.pending.pop(pk, None)
                    self._drop_if_dead(g)
                return True
            if g is None or g.state is GroupState.DEAD:
                g = self.groups[d.group] = Group(d.group)
            pe = int(d.value["producer_epoch"])  # type: ignore[call-overload]
            g.pending[pk] = PendingOffset(_offset(d.value), pe)
            return True
        # group metadata
        if d.value is None:
            g = self.groups.get(d.group)
            if g is not None:
                g.members.clear()
                g.has_metadata = False
                g.generation = 0
                g.protocol = g.leader = g.protocol_type = ""
                g.state = GroupState.EMPTY
                self._drop_if_dead(g)
            return True
        g = self.groups.get(d.group)
        if g is None or g.state is GroupState.DEAD:
            g = self.groups[d.group] = Group(d.group)
        v = d.value
        g.has_metadata = True
        g.generation = int(v["generation"])  # type: ignore[call-overload]
        g.protocol_type = str(v["protocol_type"])
        g.protocol = str(v["protocol"])
        g.leader = str(v["leader"])
        old = g.members
        g.members = {}
        for mv in v["members"]:  # type: ignore[attr-defined]
            m = Member(
                member_id=str(mv["member_id"]),
                instance_id=str(mv["instance_id"]),
                client_id=str(mv["client_id"]),
                session_timeout_ms=int(mv["session_timeout_ms"]),
                rebalance_timeout_ms=int(mv["rebalance_timeout_ms"]),
                protocols=[(str(n), rec.unb64(b)) for n, b in mv["protocols"]],
                assignment=rec.unb64(mv["assignment"]),
            )
            prev = old.get(m.member_id)
            m.last_seen_ms = prev.last_seen_ms if prev is not None else now_ms
            g.members[m.member_id] = m
        g.state = state_from_durable(g, bool(v["assigned"]))
        g.rebalance_deadline_ms = 0
        for m in g.members.values():
            m.rejoined = False
        return True

    def _drop_if_dead(self, g: Group) -> None:
        if not g.has_metadata and not g.offsets and not g.members and not g.pending:
            g.state = GroupState.DEAD
            del self.groups[g.group_id]

    def durable_view(self) -> dict[str, object]:
        return {gid: g.durable_view() for gid, g in sorted(self.groups.items())}
