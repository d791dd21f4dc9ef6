"""Per-producer state of one partition: idempotence (sequences) and open transactions.

Spec: docs/transactions.md "Producer state on the partition leader" and "Control batches".
The :class:`~services.broker.storage.log.Log` owns one :class:`ProducerStateManager` (as
Kafka's UnifiedLog owns its ProducerStateManager) and calls it under its lock:

* leader appends: :meth:`ProducerStateManager.check` validates every batch with
  ``producer_id >= 0`` in order *before* anything is written (rules 1-5 of the spec) and
  reports duplicates; after the write :meth:`apply_data` records each written batch;
* markers: :meth:`check_marker` (leader only) then :meth:`apply_marker`;
* followers and recovery replay: :meth:`apply_batch` for every batch, no validation.

Non-idempotent batches (``producer_id == -1``) never reach this module.

Threads: mutated only by the log's writer under the log's lock. ``first_unstable_offset``
is a plain attribute recomputed after each change, so any thread may read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from headwater.batch.control import ControlRecord
from headwater.batch.layout import ATTR_TRANSACTIONAL, BatchHeader
from headwater.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from services.broker.storage.txn_index import AbortedTxn

#: Sequences wrap at 2^31 (i32 base_sequence).
SEQ_MOD = 1 << 31
#: Batches remembered per producer for duplicate detection (max in flight).
MAX_CACHED_BATCHES = 5


class BatchMetadata(NamedTuple):
    """One appended batch of a producer, as remembered for duplicate detection."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    """What the partition knows of one producer id (spec "Producer state")."""

    producer_id: int
    epoch: int
    #: The last <= 5 batches of ``epoch``, oldest first (cleared by a marker).
    batches: list[BatchMetadata] = field(default_factory=list)
    #: First offset of the open transaction, -1 when none is open.
    current_txn_first_offset: int = -1
    #: Coordinator epoch of the last marker (-1: none yet).
    coordinator_epoch: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        """Sequence of the last cached batch, -1 when none (next batch must start at 0)."""
        return self.batches[-1].last_seq if self.batches else -1

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_id,
            self.epoch,
            list(self.batches),
            self.current_txn_first_offset,
            self.coordinator_epoch,
            self.last_timestamp,
        )


def last_seq_of(h: BatchHeader) -> int:
    return (h.base_sequence + h.last_offset_delta) % SEQ_MOD


class ProducerStateManager:
    """The producer entries of one partition (see module doc for who calls what)."""

    def __init__(self, entries: Iterable[ProducerEntry] = ()) -> None:
        self.entries: dict[int, ProducerEntry] = {e.producer_id: e for e in entries}
        self._ongoing = {
            e.producer_id: e.current_txn_first_offset
            for e in self.entries.values()
            if e.current_txn_first_offset >= 0
        }
        #: Smallest first offset of an open transaction, None when none is open.
        self.first_unstable_offset: int | None = min(self._ongoing.values(), default=None)

    # -- leader-side validation ---------------------------------------------------------

    def check(self, batches: Sequence[tuple[int, BatchHeader]]) -> list[BatchMetadata | None]:
        """Validate ``batches`` in order against the state; nothing is changed.

        Returns, per batch, the cached metadata of the original when it is a duplicate,
        else None (also for non-idempotent batches). Raises InvalidProducerEpochError,
        OutOfOrderSequenceNumberError, UnknownProducerIdError or InvalidTxnStateError for
        the first batch that breaks a rule.
        """
        out: list[BatchMetadata | None] = []
        # pid -> (epoch, last_seq, txn open) as the earlier batches of this call leave it
        pending: dict[int, tuple[int, int, bool]] = {}
        for _, h in batches:
            pid = h.producer_id
            if pid < 0:
                out.append(None)
                continue
            entry = self.entries.get(pid)
            epoch, seq = h.producer_epoch, h.base_sequence
            if pid in pending:
                cur: tuple[int, int, bool] | None = pending[pid]
            elif entry is not None:
                cur = (entry.epoch, entry.last_seq, entry.current_txn_first_offset >= 0)
            else:
                cur = None
            if cur is not None and epoch < cur[0]:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than the partition's {cur[0]}"
                )
            if entry is not None and epoch == entry.epoch:
                last = last_seq_of(h)
                dup = next(
                    (b for b in entry.batches if b.first_seq == seq and b.last_seq == last), None
                )
                if dup is not None:
                    out.append(dup)
                    continue
            if cur is None:
                if seq != 0:
                    raise UnknownProducerIdError(
                        f"no state for producer {pid}; its first batch has sequence {seq}, not 0"
                    )
            elif epoch > cur[0] or cur[1] < 0:
                if seq != 0:
                    raise OutOfOrderSequenceNumberError(
                        f"producer {pid} epoch {epoch} must start at sequence 0, got {seq}"
                    )
            elif seq != (cur[1] + 1) % SEQ_MOD:
                raise OutOfOrderSequenceNumberError(
                    f"producer {pid} epoch {epoch}: sequence {seq} does not follow {cur[1]}"
                )
            txn_open = cur is not None and cur[2]
            if h.attributes & ATTR_TRANSACTIONAL:
                txn_open = True
            elif txn_open:
                raise InvalidTxnStateError(
                    f"non-transactional batch from producer {pid} while its transaction is open"
                )
            pending[pid] = (epoch, last_seq_of(h), txn_open)
            out.append(None)
        return out

    def ahead_of_sequence(self, h: BatchHeader) -> bool:
        """True when ``h`` (a producer's batch) starts after the sequence its producer must
        send next: an earlier batch of that producer is missing, maybe still on its way in
        another request. False for a non-idempotent batch, a stale epoch, the expected
        sequence and a sequence behind it (a duplicate, or an error :meth:`check` reports).
        Nothing is changed."""
        if h.producer_id < 0:
            return False
        entry = self.entries.get(h.producer_id)
        if entry is not None and h.producer_epoch < entry.epoch:
            return False
        same_epoch = entry is not None and entry.epoch == h.producer_epoch
        expected = entry.last_seq + 1 if same_epoch and entry is not None else 0
        gap = (h.base_sequence - expected) % SEQ_MOD
        return 0 < gap < SEQ_MOD // 2

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """A marker may be appended: its epoch and coordinator epoch are not stale."""
        entry = self.entries.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker epoch {producer_epoch} of producer {producer_id} is older than "
                f"the partition's {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker from coordinator epoch {coordinator_epoch} for producer "
                f"{producer_id}; the partition has seen {entry.coordinator_epoch}"
            )

    # -- applying appended batches ------------------------------------------------------

    def apply_data(self, h: BatchHeader, first_offset: int) -> None:
        """Record a written data batch of ``h.producer_id`` (>= 0) at ``first_offset``."""
        pid = h.producer_id
        entry = self.entries.get(pid)
        if entry is None:
            entry = self.entries[pid] = ProducerEntry(pid, h.producer_epoch)
        elif entry.epoch != h.producer_epoch:
            entry.epoch = h.producer_epoch
            entry.batches.clear()
        last_offset = first_offset + h.last_offset_delta
        entry.batches.append(
            BatchMetadata(
                h.base_sequence, last_seq_of(h), first_offset, last_offset, h.max_timestamp
            )
        )
        if len(entry.batches) > MAX_CACHED_BATCHES:
            del entry.batches[0]
        entry.last_timestamp = h.max_timestamp
        if h.attributes & ATTR_TRANSACTIONAL and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self._ongoing[pid] = first_offset
            self._refresh_lso()

    def apply_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        record: ControlRecord,
        offset: int,
        timestamp: int,
    ) -> AbortedTxn | None:
        """Record a written marker at ``offset``; the aborted-index entry when it is an
        ABORT closing an open transaction, else None."""
        entry = self.entries.get(producer_id)
        if entry is None:
            entry = self.entries[producer_id] = ProducerEntry(producer_id, producer_epoch)
        entry.epoch = producer_epoch
        entry.batches.clear()
        entry.coordinator_epoch = record.coordinator_epoch
        entry.last_timestamp = timestamp
        first = entry.current_txn_first_offset
        if first < 0:
            return None  # a retried marker: nothing open
        entry.current_txn_first_offset = -1
        del self._ongoing[producer_id]
        self._refresh_lso()
        if record.committed:
            return None
        lso = self.first_unstable_offset
        return AbortedTxn(producer_id, first, offset, offset + 1 if lso is None else lso)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        """A copy of the entry (safe to keep), or None."""
        e = self.entries.get(producer_id)
        return None if e is None else e.copy()

    def _refresh_lso(self) -> None:
        self.first_unstable_offset = min(self._ongoing.values(), default=None)
