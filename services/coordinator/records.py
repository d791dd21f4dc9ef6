"""The records of the offsets topic ``__consumer_offsets``, typed, and their byte encoding.

Records are the only source of durable coordinator state: a live coordinator and one that
has just taken a partition over build the same state by applying the partition's records, in
offset order, with ``GroupTable.apply`` (group.py). Every record is a typed message
(:class:`EpochMarker`, :class:`GroupMetadata`, :class:`OffsetCommit`,
:class:`PendingOffsetCommit`; the transaction coordinator adds ``TransactionRecord``,
txn/state.py) stamped with the writer's ownership epoch (:class:`Record`); handlers build
messages, never bytes, and :func:`decode` is the one way back from bytes.

Layout on the log (keys chosen so that compaction keeps exactly the latest record of each
thing; the byte layout is the one every earlier version wrote, so old logs still load)::

    key                                        value (UTF-8 JSON; null = tombstone)
    b"g\\0" + group                             group metadata (see GroupValue)
    b"o\\0" + group + b"\\0" + topic + b"\\0" + p  {"offset", "leader_epoch", "metadata",
                                                 "commit_timestamp"}
    b"e\\0" + epoch                            {"epoch", "coordinator_id"}  (epoch marker)
    b"p\\0" + group + b"\\0" + topic + b"\\0" + p + b"\\0" + pid
                                               a PENDING transactional offset (TxnOffsetCommit):
                                               {"offset", "leader_epoch", "metadata",
                                                "commit_timestamp", "producer_epoch"}

Pending offsets (docs/transactions.md, "Transactional offsets") are invisible to OffsetFetch.
WriteTxnOffsetMarker resolves those of one (group, pid) written at an epoch below the marker's:
commit appends ordinary offset records with their values and a tombstone per pending key,
abort only the tombstones — so replay needs no notion of markers and a retried marker finds
nothing left to resolve.

Group metadata value: ``{"generation", "protocol_type", "protocol", "leader",
"assigned": bool, "members": [{"member_id", "instance_id", "client_id",
"session_timeout_ms", "rebalance_timeout_ms", "protocols": [[name, base64 metadata]],
"assignment": base64}]}`` (keys sorted). ``assigned`` is false between a join completing and
the leader's SyncGroup (the group is then CompletingRebalance), true once the assignments are
stored.

Every record carries the header ``("epoch", b"<ownership epoch>")`` of the coordinator that
wrote it. Fencing: apply tracks the highest marker epoch seen so far and ignores any record
whose epoch header is lower (a deposed owner's late writes). Markers have one key per epoch,
so compaction keeps every marker and a late write stays behind the marker that fences it.

Compaction keeps the *latest* record of a key whatever its epoch, so a fenced late write could
shadow the valid value it follows. The owner therefore repairs: whenever its tail reads a record
that apply ignored, it re-appends the current valid value of that key (or a tombstone) under
its own epoch (:meth:`GroupTable.current_record`, ``log_runtime``), and the latest record of
every key is valid again within one round trip. Group ids and topic names must not contain NUL
(validated at the edge: INVALID_GROUP_ID / INVALID_REQUEST).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Protocol

EPOCH_HEADER = "epoch"
MARKER_PREFIX = b"e\x00"


class BadRecordError(ValueError):
    """A record of an internal topic that this code cannot parse."""


class Message(Protocol):
    """A typed record body: its key and its value as written to the log (None: tombstone)."""

    def key(self) -> bytes: ...

    def value(self) -> bytes | None: ...


@dataclass(frozen=True)
class Record:
    """One record of an internal topic: a typed message written under an ownership epoch."""

    message: Message
    epoch: int

    @property
    def key(self) -> bytes:
        return self.message.key()

    @property
    def value(self) -> bytes | None:
        return self.message.value()

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        return [(EPOCH_HEADER, str(self.epoch).encode())]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode())


# ------------------------------------------------------------------ messages


@dataclass(frozen=True)
class EpochMarker:
    """Written by a coordinator when it takes a partition over: fences lower epochs."""

    epoch: int
    coordinator_id: int

    def key(self) -> bytes:
        return MARKER_PREFIX + str(self.epoch).encode()

    def value(self) -> bytes:
        return json.dumps({"epoch": self.epoch, "coordinator_id": self.coordinator_id}).encode()


@dataclass(frozen=True)
class Offset:
    """A committed offset (the value of an offset record)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int

    def fields(self) -> dict[str, object]:
        return {
            "offset": self.offset,
            "leader_epoch": self.leader_epoch,
            "metadata": self.metadata,
            "commit_timestamp": self.commit_timestamp,
        }

    @staticmethod
    def from_fields(v: dict[str, Any]) -> Offset:
        return Offset(
            int(v["offset"]),
            int(v["leader_epoch"]),
            str(v["metadata"]),
            int(v["commit_timestamp"]),
        )


@dataclass(frozen=True)
class PendingOffset:
    """A transactional offset awaiting its transaction's outcome."""

    offset: Offset
    producer_epoch: int


@dataclass(frozen=True)
class MemberValue:
    """A member as the group metadata record stores it (its durable part)."""

    member_id: str
    instance_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes

    def fields(self) -> dict[str, object]:
        return {
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "client_id": self.client_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocols": [[n, b64(m)] for n, m in self.protocols],
            "assignment": b64(self.assignment),
        }

    @staticmethod
    def from_fields(v: dict[str, Any]) -> MemberValue:
        return MemberValue(
            member_id=str(v["member_id"]),
            instance_id=str(v["instance_id"]),
            client_id=str(v["client_id"]),
            session_timeout_ms=int(v["session_timeout_ms"]),
            rebalance_timeout_ms=int(v["rebalance_timeout_ms"]),
            protocols=tuple((str(n), unb64(m)) for n, m in v["protocols"]),
            assignment=unb64(v["assignment"]),
        )


@dataclass(frozen=True)
class GroupValue:
    """A group's durable metadata: one generation, with or without its assignments."""

    generation: int
    protocol_type: str
    protocol: str
    leader: str
    assigned: bool
    members: tuple[MemberValue, ...]

    def encode(self) -> bytes:
        return json.dumps(
            {
                "generation": self.generation,
                "protocol_type": self.protocol_type,
                "protocol": self.protocol,
                "leader": self.leader,
                "assigned": self.assigned,
                "members": [m.fields() for m in self.members],
            },
            sort_keys=True,
        ).encode()

    @staticmethod
    def from_fields(v: dict[str, Any]) -> GroupValue:
        return GroupValue(
            generation=int(v["generation"]),
            protocol_type=str(v["protocol_type"]),
            protocol=str(v["protocol"]),
            leader=str(v["leader"]),
            assigned=bool(v["assigned"]),
            members=tuple(MemberValue.from_fields(m) for m in v["members"]),
        )


@dataclass(frozen=True)
class GroupMetadata:
    """The group metadata record (``value`` None: the group's tombstone)."""

    group_id: str
    group: GroupValue | None

    def key(self) -> bytes:
        return b"g\x00" + self.group_id.encode()

    def value(self) -> bytes | None:
        return None if self.group is None else self.group.encode()


def _tp_key(prefix: bytes, group: str, topic: str, partition: int) -> bytes:
    return prefix + group.encode() + b"\x00" + topic.encode() + b"\x00" + str(partition).encode()


@dataclass(frozen=True)
class OffsetCommit:
    """A committed offset of (group, topic, partition) (``offset`` None: its tombstone)."""

    group_id: str
    topic: str
    partition: int
    offset: Offset | None

    def key(self) -> bytes:
        return _tp_key(b"o\x00", self.group_id, self.topic, self.partition)

    def value(self) -> bytes | None:
        return None if self.offset is None else json.dumps(self.offset.fields()).encode()


@dataclass(frozen=True)
class PendingOffsetCommit:
    """A pending transactional offset of (group, topic, partition, producer id)
    (``pending`` None: its tombstone, once the transaction's marker resolved it)."""

    group_id: str
    topic: str
    partition: int
    producer_id: int
    pending: PendingOffset | None

    def key(self) -> bytes:
        tp = _tp_key(b"p\x00", self.group_id, self.topic, self.partition)
        return tp + b"\x00" + str(self.producer_id).encode()

    def value(self) -> bytes | None:
        if self.pending is None:
            return None
        body = {**self.pending.offset.fields(), "producer_epoch": self.pending.producer_epoch}
        return json.dumps(body).encode()


#: The messages of the offsets topic.
GroupMessage = EpochMarker | GroupMetadata | OffsetCommit | PendingOffsetCommit


def marker(epoch: int, coordinator_id: int) -> Record:
    return Record(EpochMarker(epoch, coordinator_id), epoch)


# ------------------------------------------------------------------ decoding


def json_object(key: bytes, value: bytes | None) -> dict[str, Any] | None:
    """A record value parsed as a JSON object (None for a tombstone)."""
    if value is None:
        return None
    try:
        body = json.loads(value)
    except ValueError as exc:
        raise BadRecordError(f"value of {key!r} is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRecordError(f"value of {key!r} is not a JSON object")
    return body


def decode_marker(key: bytes, value: bytes | None) -> EpochMarker:
    body = json_object(key, value)
    if body is None:
        raise BadRecordError(f"epoch marker {key!r} without a value")
    try:
        return EpochMarker(int(body["epoch"]), int(body["coordinator_id"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise BadRecordError(f"bad epoch marker {key!r}: {exc!r}") from exc


def decode(key: bytes | None, value: bytes | None) -> GroupMessage:
    """The typed message of an offsets-topic record. Raises :class:`BadRecordError` for a
    record this code cannot parse (unknown kind, malformed key or value)."""
    if key is None or len(key) < 2 or key[1:2] != b"\x00":
        raise BadRecordError(f"bad offsets-topic key {key!r}")
    kind = key[:1]
    if kind == b"e":
        return decode_marker(key, value)
    body = json_object(key, value)
    try:
        if kind == b"g":
            group = None if body is None else GroupValue.from_fields(body)
            return GroupMetadata(key[2:].decode(), group)
        parts = key[2:].split(b"\x00")
        if kind == b"o" and len(parts) == 3:
            offset = None if body is None else Offset.from_fields(body)
            return OffsetCommit(parts[0].decode(), parts[1].decode(), int(parts[2]), offset)
        if kind == b"p" and len(parts) == 4:
            pending = None
            if body is not None:
                pending = PendingOffset(Offset.from_fields(body), int(body["producer_epoch"]))
            return PendingOffsetCommit(
                parts[0].decode(), parts[1].decode(), int(parts[2]), int(parts[3]), pending
            )
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise BadRecordError(f"bad offsets-topic record {key!r}: {exc!r}") from exc
    raise BadRecordError(f"unknown offsets-topic record kind {key!r}")


def epoch_of(headers: tuple[tuple[str, bytes | None], ...] | list[tuple[str, bytes]]) -> int:
    for name, raw in headers:
        if name == EPOCH_HEADER and raw is not None:
            return int(raw)
    return -1
