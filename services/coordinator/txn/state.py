"""Transaction metadata, the ``__transaction_state`` records and their replay (pure: no I/O).

Records (every record carries the ``("epoch", b"<ownership epoch>")`` header, records.py)::

    key                          value (UTF-8 JSON; null = tombstone)
    b"t\\0" + transactional.id    {"producer_id", "producer_epoch", "last_producer_epoch",
                                  "next_producer_id", "timeout_ms", "state",
                                  "partitions": [[topic, partition], ...], "groups": [...],
                                  "start_ms", "update_ms"}
    b"e\\0" + epoch               {"epoch", "coordinator_id"}  (epoch marker, records.py)

``state`` is a :class:`TxnState` value name. ``producer_epoch`` is the epoch the producer uses
now; Prepare*/Complete* records carry the epoch bumped at the end of the transaction (the
markers' epoch) and ``last_producer_epoch`` the transaction's own epoch (docs/transactions.md,
KIP-890). ``next_producer_id`` is -1 unless the bumped epoch reached ``MAX_EPOCH``: the
Complete* record then moves the id to it at epoch 0. Fencing of a deposed owner's late writes
and their repair work exactly as in the offsets topic (records.py): replay ignores a record
whose epoch header is below the highest marker seen.

Owned by one asyncio task per ``__transaction_state`` partition (txn/runtime.py).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, replace

from headwater.v1 import transaction_pb2 as tpb
from services.coordinator import records as rec

TXN_PREFIX = b"t\x00"
#: The highest epoch a producer id can reach (i16 max): beyond it the id is replaced.
MAX_EPOCH = 32767


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"

    @property
    def proto(self) -> int:
        return _PROTO[self]

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def idle(self) -> bool:
        """No transaction open or ending: a new one may begin."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_PROTO = {
    TxnState.EMPTY: tpb.TXN_EMPTY,
    TxnState.ONGOING: tpb.TXN_ONGOING,
    TxnState.PREPARE_COMMIT: tpb.TXN_PREPARE_COMMIT,
    TxnState.PREPARE_ABORT: tpb.TXN_PREPARE_ABORT,
    TxnState.COMPLETE_COMMIT: tpb.TXN_COMPLETE_COMMIT,
    TxnState.COMPLETE_ABORT: tpb.TXN_COMPLETE_ABORT,
    TxnState.DEAD: tpb.TXN_DEAD,
}


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional.id's durable state (immutable: handlers build the next value)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int = -1
    next_producer_id: int = -1
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[tuple[str, int]] = frozenset()
    groups: frozenset[str] = frozenset()
    start_ms: int = -1
    update_ms: int = 0

    def with_(self, **changes: object) -> TxnMetadata:
        return replace(self, **changes)  # type: ignore[arg-type]

    def value(self) -> bytes:
        return json.dumps(
            {
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "last_producer_epoch": self.last_producer_epoch,
                "next_producer_id": self.next_producer_id,
                "timeout_ms": self.timeout_ms,
                "state": self.state.value,
                "partitions": [[t, p] for t, p in sorted(self.partitions)],
                "groups": sorted(self.groups),
                "start_ms": self.start_ms,
                "update_ms": self.update_ms,
            },
            sort_keys=True,
        ).encode()

    def record(self, epoch: int) -> rec.Record:
        return rec.Record(txn_key(self.transactional_id), self.value(), epoch)

    @staticmethod
    def from_value(txn_id: str, raw: bytes) -> TxnMetadata:
        v = json.loads(raw)
        if not isinstance(v, dict):
            raise rec.BadRecordError(f"bad transaction value for {txn_id!r}")
        return TxnMetadata(
            transactional_id=txn_id,
            producer_id=int(v["producer_id"]),
            producer_epoch=int(v["producer_epoch"]),
            last_producer_epoch=int(v["last_producer_epoch"]),
            next_producer_id=int(v.get("next_producer_id", -1)),
            timeout_ms=int(v["timeout_ms"]),
            state=TxnState(v["state"]),
            partitions=frozenset((str(t), int(p)) for t, p in v["partitions"]),
            groups=frozenset(str(g) for g in v["groups"]),
            start_ms=int(v["start_ms"]),
            update_ms=int(v["update_ms"]),
        )


def txn_key(txn_id: str) -> bytes:
    return TXN_PREFIX + txn_id.encode()


@dataclass
class TxnTable:
    """Every transactional.id of one ``__transaction_state`` partition, plus the fencing epoch
    seen in the log (the :class:`~services.coordinator.log_runtime.ReplayTable` contract)."""

    txns: dict[str, TxnMetadata] = field(default_factory=dict)
    marker_epoch: int = -1
    marker_owner: int = -1

    def replay(self, key: bytes | None, value: bytes | None, epoch: int, now_ms: int) -> bool:
        """Apply one record; False when ignored (fenced late write). Raises
        records.BadRecordError for records this code cannot parse."""
        if key is None or len(key) < 2 or key[1:2] != b"\x00":
            raise rec.BadRecordError(f"bad transaction-state key {key!r}")
        if epoch < self.marker_epoch:
            return False
        if key.startswith(rec.MARKER_PREFIX):
            d = rec.decode(key, value, epoch)
            assert d.value is not None
            self.marker_epoch = int(d.value["epoch"])  # type: ignore[call-overload]
            self.marker_owner = int(d.value["coordinator_id"])  # type: ignore[call-overload]
            return True
        if not key.startswith(TXN_PREFIX):
            raise rec.BadRecordError(f"unknown transaction-state record kind {key!r}")
        txn_id = key[len(TXN_PREFIX) :].decode()
        if value is None:
            self.txns.pop(txn_id, None)
        else:
            self.txns[txn_id] = TxnMetadata.from_value(txn_id, value)
        return True

    def current_record(self, key: bytes, epoch: int) -> rec.Record:
        if key.startswith(rec.MARKER_PREFIX):
            return rec.marker(self.marker_epoch, self.marker_owner)
        meta = self.txns.get(key[len(TXN_PREFIX) :].decode())
        return rec.Record(key, None, epoch) if meta is None else meta.record(epoch)
