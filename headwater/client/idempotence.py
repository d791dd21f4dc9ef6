"""Idempotent-producer bookkeeping: producer id/epoch and per-partition sequence numbers.

Pure logic, no I/O (docs/transactions.md, "The client"). One :class:`Sequencer` belongs to one
producer and is used only by its sender routine on the producer's loop.

Contract:

* Sequences are assigned when a batch is *drained* (``assign``): batch ``k`` of partition ``p``
  gets ``base_sequence = next_seq(p)``, and ``next_seq`` advances by the record count
  (mod 2^31). A retried batch keeps its sequence and its bytes.
* ``acked(tp, base, count)`` records that the broker acknowledged the batch (a duplicate answer
  is an acknowledgement too: the broker returns the original offset).
* ``rewind(tp, base)``: the broker definitely appended nothing of the batches from ``base`` on
  (an in-band error code for the partition: the broker checks the partition's batches before
  appending any); the next drained batch reuses ``base``. Only legal while no batch after
  ``base`` is in flight — the sender guarantees it by keeping at most one request per
  partition in flight.
* ``classify_out_of_order(tp, base)``: OUT_OF_ORDER_SEQUENCE_NUMBER for a batch whose
  predecessor (``base - 1``) was acknowledged is FATAL (records were lost: never a silent
  reset, the Redpanda #3039 trap); when the predecessor is still unacknowledged it is
  retriable (resend in order).
* ``fail(exc)``: the producer enters the failed state; every pending and later send raises
  ``exc``. INVALID_PRODUCER_EPOCH, PRODUCER_FENCED and a fatal OUT_OF_ORDER put it there.
* ``reset(pid, epoch)``: a new producer id or epoch (InitProducerId, or the epoch returned by
  EndTxn): every partition starts again at sequence 0.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(slots=True)
class PartitionSeq:
    """Sequence state of one partition: next to assign, last acknowledged (-1: none yet)."""

    next_seq: int = 0
    last_acked: int = -1


class Sequencer:
    """See the module docstring."""

    def __init__(self) -> None:
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

    def assign(self, tp: TopicPartition, count: int) -> int:
        """The base sequence of a newly drained batch of ``count`` records."""
        if count <= 0:
            raise ValueError("a batch holds at least one record")
        st = self._part(tp)
        base = st.next_seq
        st.next_seq = (base + count) % SEQ_MOD
        return base

    def acked(self, tp: TopicPartition, base: int, count: int) -> None:
        """The batch ``[base, base + count)`` is acknowledged (fresh or duplicate)."""
        st = self._part(tp)
        last = (base + count - 1) % SEQ_MOD
        if st.last_acked < 0 or _seq_after(last, st.last_acked):
            st.last_acked = last

    def rewind(self, tp: TopicPartition, base: int) -> None:
        """Nothing from ``base`` on was appended; reuse ``base`` for the next batch."""
        st = self._part(tp)
        if st.last_acked >= 0 and not _seq_after(base, st.last_acked):
            raise errors.InvalidRequestError(
                f"cannot rewind {tp} to sequence {base}: {st.last_acked} is acknowledged"
            )
        st.next_seq = base

    def predecessor_acked(self, tp: TopicPartition, base: int) -> bool:
        """Whether the batch before the one starting at ``base`` has been acknowledged."""
        st = self._part(tp)
        if base == 0:
            return True  # nothing precedes sequence 0 of this epoch
        return st.last_acked == (base - 1) % SEQ_MOD

    def classify_out_of_order(self, tp: TopicPartition, base: int) -> bool:
        """True when OUT_OF_ORDER_SEQUENCE_NUMBER for ``base`` is fatal (see docstring)."""
        return self.predecessor_acked(tp, base)

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

    max_batches = MAX_IN_FLIGHT_IDEMPOTENT

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

    def assign(self, tp: TopicPartition, count: int) -> int:
        return self.seq.assign(tp, count)

    def expired_sequenced(self, batch: object, err: BaseException) -> None:
        """A sequenced batch expired while queued for a retry: its outcome is unknown."""
        unknown_outcome(self, err)


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
