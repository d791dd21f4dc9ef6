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
and their repair work exactly as in the offsets topic (records.py): apply ignores a record
whose epoch header is below the highest marker seen.

Typed: a record is a :class:`TransactionRecord` (or the shared ``records.EpochMarker``) and
:meth:`TxnTable.apply` is the only way the table changes — at load and at run time alike.

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
        return rec.Record(TransactionRecord(self.transactional_id, self), epoch)

    @staticmethod
    def from_value(txn_id: str, raw: bytes) -> TxnMetadata:
        v = rec.json_object(txn_key(txn_id), raw)
        assert v is not None
        try:
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
        except (KeyError, TypeError, ValueError) as exc:
            raise rec.BadRecordError(f"bad transaction value for {txn_id!r}: {exc!r}") from exc


@dataclass(frozen=True)
class TransactionRecord:
    """The record of one transactional.id (``metadata`` None: its tombstone)."""

    transactional_id: str
    metadata: TxnMetadata | None

    def key(self) -> bytes:
        return txn_key(self.transactional_id)

    def value(self) -> bytes | None:
        return None if self.metadata is None else self.metadata.value()


def txn_key(txn_id: str) -> bytes:
    return TXN_PREFIX + txn_id.encode()


@dataclass
class TxnTable:
    """Every transactional.id of one ``__transaction_state`` partition, plus the fencing epoch
    seen in the log (the :class:`~services.coordinator.log_runtime.ReplayTable` contract)."""

    txns: dict[str, TxnMetadata] = field(default_factory=dict)
    marker_epoch: int = -1
    marker_owner: int = -1

    @staticmethod
    def decode(key: bytes | None, value: bytes | None, epoch: int) -> rec.Record:
        """A record read from ``__transaction_state``, typed (raises records.BadRecordError
        for records this code cannot parse)."""
        if key is None or len(key) < 2 or key[1:2] != b"\x00":
            raise rec.BadRecordError(f"bad transaction-state key {key!r}")
        if key.startswith(rec.MARKER_PREFIX):
            return rec.Record(rec.decode_marker(key, value), epoch)
        if not key.startswith(TXN_PREFIX):
            raise rec.BadRecordError(f"unknown transaction-state record kind {key!r}")
        txn_id = key[len(TXN_PREFIX) :].decode()
        meta = None if value is None else TxnMetadata.from_value(txn_id, value)
        return rec.Record(TransactionRecord(txn_id, meta), epoch)

    def replay(self, key: bytes | None, value: bytes | None, epoch: int, now_ms: int) -> bool:
        """:meth:`apply` of the record with this key, value and epoch header."""
        return self.apply(self.decode(key, value, epoch), now_ms)

    def apply(self, record: rec.Record, now_ms: int) -> bool:
        """Apply one record; False when ignored (fenced: an epoch below the highest marker
        seen). The only way the table changes: used by the load replay and, for the records
        handlers return, once they are read back from the log."""
        if record.epoch < self.marker_epoch:
            return False
        m = record.message
        match m:
            case rec.EpochMarker():
                self.marker_epoch, self.marker_owner = m.epoch, m.coordinator_id
            case TransactionRecord(metadata=None):
                self.txns.pop(m.transactional_id, None)
            case TransactionRecord(metadata=TxnMetadata() as meta):
                self.txns[m.transactional_id] = meta
            case _:
                raise rec.BadRecordError(f"not a transaction-state record: {m!r}")
        return True

    def current_record(self, key: bytes, epoch: int) -> rec.Record:
        if key.startswith(rec.MARKER_PREFIX):
            return rec.marker(self.marker_epoch, self.marker_owner)
        txn_id = key[len(TXN_PREFIX) :].decode()
        return rec.Record(TransactionRecord(txn_id, self.txns.get(txn_id)), epoch)
