"""The records of the offsets topic ``__consumer_offsets`` and how they are replayed.

Records are the only source of coordinator state: a live coordinator and one that has just
taken a partition over build the same state by feeding the partition's records, in offset
order, to :func:`replay`.

Layout (keys chosen so that compaction keeps exactly the latest record of each thing)::

    key                                        value (UTF-8 JSON; null = tombstone)
    b"g\\0" + group                             group metadata (see GroupRecord)
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
"assignment": base64}]}``. ``assigned`` is false between a join completing and the leader's
SyncGroup (the group is then CompletingRebalance), true once the assignments are stored.

Every record carries the header ``("epoch", b"<ownership epoch>")`` of the coordinator that
wrote it. Fencing: replay tracks the highest marker epoch seen so far and ignores any record
whose epoch header is lower (a deposed owner's late writes). Markers have one key per epoch,
so compaction keeps every marker and a late write stays behind the marker that fences it.

Compaction keeps the *latest* record of a key whatever its epoch, so a fenced late write could
shadow the valid value it follows. The owner therefore repairs: whenever its tail reads a record
that replay ignored, it re-appends the current valid value of that key (or a tombstone) under
its own epoch (:meth:`GroupTable.current_record`, ``runtime``), and the latest record of every
key is valid again within one round trip. Group ids and topic names must
not contain NUL (validated at the edge: INVALID_GROUP_ID / INVALID_REQUEST).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

EPOCH_HEADER = "epoch"
MARKER_PREFIX = b"e\x00"


@dataclass(frozen=True)
class Record:
    key: bytes
    value: bytes | None
    epoch: int

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        return [(EPOCH_HEADER, str(self.epoch).encode())]


def group_key(group: str) -> bytes:
    return b"g\x00" + group.encode()


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return b"o\x00" + group.encode() + b"\x00" + topic.encode() + b"\x00" + str(partition).encode()


def pending_key(group: str, topic: str, partition: int, producer_id: int) -> bytes:
    tail = group.encode() + b"\x00" + topic.encode() + b"\x00" + str(partition).encode()
    return b"p\x00" + tail + b"\x00" + str(producer_id).encode()


def marker(epoch: int, coordinator_id: int) -> Record:
    value = json.dumps({"epoch": epoch, "coordinator_id": coordinator_id}).encode()
    return Record(MARKER_PREFIX + str(epoch).encode(), value, epoch)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode())


@dataclass(frozen=True)
class Decoded:
    """One record of the offsets topic, parsed: ``kind`` "group" | "offset" | "pending" |
    "marker" (``producer_id`` only for "pending")."""

    kind: str
    group: str = ""
    topic: str = ""
    partition: int = -1
    value: dict[str, object] | None = None
    epoch: int = -1
    producer_id: int = -1


class BadRecordError(ValueError):
    """A record of the offsets topic that this code cannot parse."""


def decode(key: bytes | None, value: bytes | None, epoch: int) -> Decoded:
    if key is None or len(key) < 2 or key[1:2] != b"\x00":
        raise BadRecordError(f"bad offsets-topic key {key!r}")
    body = json.loads(value) if value is not None else None
    if body is not None and not isinstance(body, dict):
        raise BadRecordError(f"bad offsets-topic value for {key!r}")
    kind = key[:1]
    if kind == b"e":
        return Decoded("marker", value=body, epoch=epoch)
    if kind == b"g":
        return Decoded("group", group=key[2:].decode(), value=body, epoch=epoch)
    if kind == b"o":
        parts = key[2:].split(b"\x00")
        if len(parts) != 3:
            raise BadRecordError(f"bad offset key {key!r}")
        return Decoded(
            "offset",
            group=parts[0].decode(),
            topic=parts[1].decode(),
            partition=int(parts[2]),
            value=body,
            epoch=epoch,
        )
    if kind == b"p":
        parts = key[2:].split(b"\x00")
        if len(parts) != 4:
            raise BadRecordError(f"bad pending offset key {key!r}")
        return Decoded(
            "pending",
            group=parts[0].decode(),
            topic=parts[1].decode(),
            partition=int(parts[2]),
            value=body,
            epoch=epoch,
            producer_id=int(parts[3]),
        )
    raise BadRecordError(f"unknown offsets-topic record kind {key!r}")


def epoch_of(headers: tuple[tuple[str, bytes | None], ...] | list[tuple[str, bytes]]) -> int:
    for name, raw in headers:
        if name == EPOCH_HEADER and raw is not None:
            return int(raw)
    return -1
