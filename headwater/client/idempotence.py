"""Idempotent-producer bookkeeping: producer id/epoch and per-partition sequence numbers.

Pure logic, no I/O (docs/transactions.md, "The client"). One :class:`Sequencer` belongs to one
producer and is used only by its sender routine on the producer's loop.

Contract (Kafka's TransactionManager / RecordAccumulator rules):

* Sequences are assigned when a batch is *drained* (``assign``): batch ``k`` of partition ``p``
  gets ``base_seq = next_seq(p)``, and ``next_seq`` advances by the record count
  (mod 2^31). A retried batch keeps its sequence and its bytes.
* The *window* of a partition: every batch assigned since the oldest one not yet resolved
  (acknowledged, or dropped), in sequence order. It holds at most ``max_in_flight`` batches
  (``room``), so every unresolved batch is among the last ``max_in_flight`` (<= 5) batches
  the broker may have appended, which it remembers to answer a resend as a duplicate with
  the original offset. Batches of the window may be in flight in several requests at once.
* A retried batch is resent alone and only when it is the oldest unresolved one (``first``):
  retries go out in sequence order, one at a time, until the partition is in order again.
* ``acked(tp, batch)``: the broker acknowledged the batch (a duplicate answer is an
  acknowledgement too: the broker returns the original offset).
* ``drop(tp, batch)``: the broker definitely appended nothing of ``batch`` (an in-band error
  code: the broker checks a partition's batches before appending any; not one of the codes it
  also answers after an append, ``sender.MAYBE_APPENDED``) and it failed for good.
  Its sequence space is released: every later batch of the window moves down by its record
  count and is marked ``restamp`` (its bytes get the new ``base_sequence`` before it is sent
  again; a copy already in flight is rejected as out of order, since the broker lacks the
  dropped batch). Acknowledged sequences are never reused (InvalidRequestError).
* ``predecessor_acked(tp, base)``: recorded per batch when it is sent (``pred_acked``). An
  OUT_OF_ORDER_SEQUENCE_NUMBER answer for a batch whose predecessor was acknowledged *before
  it was sent* is FATAL (records were lost: never a silent reset, the Redpanda #3039 trap);
  otherwise it is retriable (an earlier batch was still pending: gRPC calls to one broker are
  concurrent, so a later request may overtake an earlier one; resend in order).
* ``fail(exc)``: the producer enters the failed state; every pending and later send raises
  ``exc``. INVALID_PRODUCER_EPOCH, PRODUCER_FENCED and a fatal OUT_OF_ORDER put it there.
* ``reset(pid, epoch)``: a new producer id or epoch (InitProducerId, or the epoch returned by
  EndTxn): every partition starts again at sequence 0 with an empty window.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from headwater import errors
from headwater.client.types import TopicPartition

#: Sequence numbers wrap at 2^31 (int32, non-negative).
SEQ_MOD = 1 << 31
#: Kafka's bound: at most this many unacknowledged batches per partition with idempotence.
MAX_IN_FLIGHT_IDEMPOTENT = 5

#: Errors after which the producer can send nothing more (fatal for the producer object).
FATAL_CODES = (
    errors.InvalidProducerEpochError,
    errors.ProducerFencedError,
    errors.TransactionCoordinatorFencedError,
    errors.InvalidProducerIdMappingError,
)


class Sequenced(Protocol):
    """What the sequencer keeps in a window: a batch (``ProducerBatch``) or a test double."""

    tp: TopicPartition
    base_seq: int
    count: int
    restamp: bool


@dataclass(slots=True)
class PartitionSeq:
    """Sequence state of one partition: next to assign, last acknowledged (-1: none yet),
    the window (see module docstring) and which of its batches are resolved."""

    next_seq: int = 0
    last_acked: int = -1
    window: deque[Sequenced] = field(default_factory=deque)
    resolved: set[int] = field(default_factory=set)  # id() of resolved window batches


class Sequencer:
    """See the module docstring."""

    def __init__(self, max_in_flight: int = MAX_IN_FLIGHT_IDEMPOTENT) -> None:
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT_IDEMPOTENT:
            raise errors.InvalidConfigError(
                f"max_in_flight must be 1..{MAX_IN_FLIGHT_IDEMPOTENT} with idempotence"
            )
        self.max_in_flight = max_in_flight
        self.producer_id = -1
        self.epoch = -1
        self.failed: errors.HeadwaterError | None = None
        self.parts: dict[TopicPartition, PartitionSeq] = {}

    @property
    def has_pid(self) -> bool:
        return self.producer_id >= 0

    def reset(self, producer_id: int, epoch: int) -> None:
        if producer_id < 0 or not 0 <= epoch < 1 << 15:
            raise errors.InvalidRequestError(
                f"bad producer id/epoch from the broker: {producer_id}/{epoch}"
            )
        self.producer_id = producer_id
        self.epoch = epoch
        self.parts.clear()

    def _part(self, tp: TopicPartition) -> PartitionSeq:
        st = self.parts.get(tp)
        if st is None:
            st = self.parts[tp] = PartitionSeq()
        return st

    def next_seq(self, tp: TopicPartition) -> int:
        return self._part(tp).next_seq

    def room(self, tp: TopicPartition) -> int:
        """How many more batches of ``tp`` may be assigned sequences now."""
        st = self.parts.get(tp)
        return self.max_in_flight - (len(st.window) if st is not None else 0)

    def first(self, tp: TopicPartition) -> Sequenced | None:
        """The oldest unresolved batch of ``tp`` (None: none)."""
        st = self.parts.get(tp)
        return st.window[0] if st is not None and st.window else None

    def assign(self, batch: Sequenced) -> int:
        """Give a newly drained batch its base sequence (set on it and returned)."""
        if batch.count <= 0:
            raise ValueError("a batch holds at least one record")
        st = self._part(batch.tp)
        base = st.next_seq
        batch.base_seq = base
        st.next_seq = (base + batch.count) % SEQ_MOD
        st.window.append(batch)
        return base

    def acked(self, batch: Sequenced) -> None:
        """``batch`` is acknowledged (fresh or duplicate)."""
        st = self._part(batch.tp)
        last = (batch.base_seq + batch.count - 1) % SEQ_MOD
        if st.last_acked < 0 or _seq_after(last, st.last_acked):
            st.last_acked = last
        self._resolve(st, batch)

    @staticmethod
    def _resolve(st: PartitionSeq, batch: Sequenced) -> None:
        if not any(b is batch for b in st.window):
            return
        st.resolved.add(id(batch))
        while st.window and id(st.window[0]) in st.resolved:
            st.resolved.discard(id(st.window.popleft()))

    def drop(self, batch: Sequenced) -> list[Sequenced]:
        """Nothing of ``batch`` was appended and it failed for good: release its sequences
        (see module docstring). Returns the later batches that moved down (marked
        ``restamp``)."""
        st = self._part(batch.tp)
        if st.last_acked >= 0 and not _seq_after(batch.base_seq, st.last_acked):
            raise errors.InvalidRequestError(
                f"cannot release sequence {batch.base_seq} of {batch.tp}: "
                f"{st.last_acked} is acknowledged"
            )
        try:
            at = next(i for i, b in enumerate(st.window) if b is batch)
        except StopIteration:
            raise errors.InvalidRequestError(
                f"batch at sequence {batch.base_seq} of {batch.tp} is not outstanding"
            ) from None
        later = list(st.window)[at + 1 :]
        if any(id(b) in st.resolved for b in later):
            raise errors.InvalidRequestError(
                f"a batch after sequence {batch.base_seq} of {batch.tp} was acknowledged"
            )
        del st.window[at]
        for b in later:
            b.base_seq = (b.base_seq - batch.count) % SEQ_MOD
            b.restamp = True
        st.next_seq = (st.next_seq - batch.count) % SEQ_MOD
        while st.window and id(st.window[0]) in st.resolved:
            st.resolved.discard(id(st.window.popleft()))
        return later

    def predecessor_acked(self, tp: TopicPartition, base: int) -> bool:
        """Whether the batch before the one starting at ``base`` has been acknowledged."""
        st = self._part(tp)
        if base == 0:
            return True  # nothing precedes sequence 0 of this epoch
        return st.last_acked == (base - 1) % SEQ_MOD

    def fail(self, exc: errors.HeadwaterError) -> None:
        if self.failed is None:
            self.failed = exc

    def check(self) -> None:
        """Raise the fatal error, if the producer is in the failed state."""
        if self.failed is not None:
            raise self.failed


def _seq_after(a: int, b: int) -> bool:
    """``a`` comes after ``b`` in wrapping sequence space (distance < 2^30)."""
    return 0 < (a - b) % SEQ_MOD < SEQ_MOD // 2


def is_fatal(err: BaseException) -> bool:
    return isinstance(err, FATAL_CODES)


def resolve_enable_idempotence(
    enable_idempotence: bool | None, acks_is_all: bool, retries: int, transactional: bool
) -> bool:
    """Kafka 3.x rule: None -> on iff acks == all; True needs acks == all and retries > 0.

    A transactional producer is always idempotent (needs acks == all too).
    """
    if transactional:
        if enable_idempotence is False:
            raise errors.InvalidConfigError("a transactional producer needs enable_idempotence")
        enable_idempotence = True
    if enable_idempotence is None:
        return acks_is_all and retries > 0
    if enable_idempotence:
        if not acks_is_all:
            raise errors.InvalidConfigError("enable_idempotence=True requires acks='all'")
        if retries == 0:
            raise errors.InvalidConfigError("enable_idempotence=True requires retries > 0")
    return bool(enable_idempotence)


class Gate:
    """What a transaction adds to draining: which partitions may be sent to now.

    ``may_send(tp)`` is True once ``tp`` was added to the ongoing transaction; otherwise it
    asks for ``tp`` to be added (the transaction manager does the RPC) and returns False.
    """

    def may_send(self, tp: TopicPartition) -> bool:  # pragma: no cover - protocol default
        return True


class Producing:
    """The sender's view of an idempotent producer, handed to ``Accumulator.drain``."""

    def __init__(self, seq: Sequencer, *, transactional: bool, gate: Gate | None = None) -> None:
        self.seq = seq
        self.transactional = transactional
        self.gate = gate

    @property
    def fields(self) -> tuple[int, int, bool]:
        return self.seq.producer_id, self.seq.epoch, self.transactional

    def may_send(self, tp: TopicPartition) -> bool:
        if self.seq.failed is not None or not self.seq.has_pid:
            return False
        return self.gate is None or self.gate.may_send(tp)

    def quota(self, tp: TopicPartition, head: Sequenced) -> int:
        """How many queued batches of ``tp`` (``head`` first) may be drained now: a retry
        (``head`` has a sequence) goes alone once it is the oldest unresolved batch; fresh
        batches fill the window."""
        if head.base_seq >= 0:
            return 1 if self.seq.first(tp) is head else 0
        return self.seq.room(tp)

    def assign(self, batch: Sequenced) -> int:
        return self.seq.assign(batch)

    def sending(self, batch: SentBatch) -> None:
        """``batch`` is about to be sent: remember whether its predecessor is acknowledged
        (what an OUT_OF_ORDER_SEQUENCE_NUMBER answer to this send means)."""
        batch.pred_acked = self.seq.predecessor_acked(batch.tp, batch.base_seq)

    def expired_sequenced(self, batch: object, err: BaseException) -> None:
        """A sequenced batch expired while queued for a retry: its outcome is unknown."""
        unknown_outcome(self, err)


class SentBatch(Sequenced, Protocol):
    """A sequenced batch as sent: whether its predecessor was acknowledged at that time."""

    pred_acked: bool


def unknown_outcome(p: Producing, err: BaseException) -> None:
    """A sequenced batch failed without knowing whether the broker appended it.

    Its partition's sequence can be neither continued (a gap if it was not appended) nor
    reused (a duplicate if it was). A transactional producer only needs the transaction
    aborted (the new epoch restarts every sequence at 0): the gate records an abortable error.
    An idempotent producer enters the failed state (a new producer object gets a new id).
    """
    abortable = getattr(p.gate, "abortable", None)
    if p.transactional and callable(abortable):
        abortable(err)
        return
    fatal = errors.OutOfOrderSequenceNumberError(
        f"a batch with an assigned sequence failed with an unknown outcome ({err}); the "
        "producer cannot continue its sequences without risking a gap or a duplicate"
    )
    fatal.__cause__ = err
    p.seq.fail(fatal)
