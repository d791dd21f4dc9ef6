"""The transactional producer's state machine and its coordinator calls.

docs/transactions.md, "The client". One :class:`TransactionManager` belongs to one
``AsyncProducer(transactional_id=...)`` and runs on its loop. It owns the transaction state
(:class:`TxnState`), the partitions added to the ongoing transaction and the abortable error;
the producer id and epoch live in the shared :class:`headwater.client.idempotence.Sequencer`.

States::

    UNINITIALIZED --init()--> READY --begin()--> IN_TRANSACTION
    IN_TRANSACTION --commit()--> READY     (flush, EndTxn(commit); the new epoch from the answer)
    IN_TRANSACTION --abort()--> READY      (queued dropped, in-flight awaited, EndTxn(abort))
    (ENDING while commit/abort runs: the sender drains nothing)
    IN_TRANSACTION --a send fails--> the abortable error is set: commit() raises it, send()
                                      raises it, only abort() leaves
    ENDING --EndTxn fails retriably (timeout, coordinator moving)--> ENDING, ``unfinished`` =
           the outcome sent: only the same call (commit() again, or abort() again) re-sends
           it; the other one raises InvalidTxnStateError (Kafka's rule: the coordinator may
           already be writing that outcome's markers)
    any --PRODUCER_FENCED / INVALID_PRODUCER_EPOCH / fatal sequence error--> failed (Sequencer)

Partitions: the sender drains a partition only once it is in the transaction
(:meth:`may_send`, the :class:`headwater.client.idempotence.Gate`); the first time it asks,
the partition joins ``pending`` and one add task sends ``AddPartitionsToTxn`` for everything
pending, then wakes the sender. Coordinator calls go through :class:`CoordinatorClient` with
``key_type=TRANSACTION``, which retries NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE (with a new
FindCoordinator), COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS with backoff.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any

from headwater import errors
from headwater.client.accumulator import Accumulator, ProducerBatch
from headwater.client.connection import ConnectionPool
from headwater.client.coordinator_client import CoordinatorClient
from headwater.client.idempotence import Gate, Sequencer, is_fatal
from headwater.client.metadata import Metadata
from headwater.client.types import TopicPartition
from headwater.v1 import coordinator_pb2, transaction_pb2, transaction_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode

log = logging.getLogger(__name__)


class TransactionAbortedError(errors.InvalidTxnStateError):
    """A record of a transaction that the application aborted before it was sent."""


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    ENDING = "ending"


def offsets_of(offsets: Any) -> dict[TopicPartition, int]:
    """``{TopicPartition: next offset}``; values may also be objects with ``.offset``."""
    if not isinstance(offsets, Mapping):
        raise errors.InvalidRequestError("offsets must be a mapping TopicPartition -> offset")
    out: dict[TopicPartition, int] = {}
    for tp, off in offsets.items():
        value = getattr(off, "offset", off)
        if not isinstance(value, int) or value < 0:
            raise errors.InvalidRequestError(f"bad offset {off!r} for {tp}")
        out[TopicPartition(*tp)] = value
    return out


def group_fields(group_metadata: Any) -> tuple[str, int, str]:
    """(group_id, generation, member_id) from a group id or a consumer-like object."""
    if isinstance(group_metadata, str):
        if not group_metadata:
            raise errors.InvalidGroupIdError("group id must not be empty")
        return group_metadata, -1, ""
    group_id = getattr(group_metadata, "group_id", None)
    cfg = getattr(group_metadata, "_group_cfg", None)
    if group_id is None and cfg is not None:
        group_id = cfg.group_id
    if not isinstance(group_id, str) or not group_id:
        raise errors.InvalidGroupIdError(f"no group id in {group_metadata!r}")
    generation = getattr(group_metadata, "generation", -1)
    member_id = getattr(group_metadata, "member_id", "")
    return group_id, int(generation), str(member_id)


class TransactionManager(Gate):
    """See the module docstring."""

    def __init__(
        self,
        transactional_id: str,
        timeout_ms: int,
        seq: Sequencer,
        acc: Accumulator,
        pool: ConnectionPool,
        md: Metadata,
        *,
        request_timeout_s: float,
        retry_backoff_s: float,
    ) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.seq = seq
        self.acc = acc
        self.backoff_s = retry_backoff_s
        self.coord = CoordinatorClient(
            pool,
            md,
            timeout_s=request_timeout_s,
            backoff_s=retry_backoff_s,
            key_type=coordinator_pb2.TRANSACTION,
            stub=lambda a: transaction_pb2_grpc.TransactionCoordinatorStub(pool.channel(a)),
            retry_same=(ErrorCode.CONCURRENT_TRANSACTIONS,),
        )
        self.groups = CoordinatorClient(
            pool, md, timeout_s=request_timeout_s, backoff_s=retry_backoff_s
        )
        self.state = TxnState.UNINITIALIZED
        self.added: set[TopicPartition] = set()
        self.pending: set[TopicPartition] = set()
        self.has_offsets = False
        self.abortable_error: errors.HeadwaterError | BaseException | None = None
        # the outcome of an EndTxn sent without a definite answer (True: commit)
        self.unfinished: bool | None = None
        #: a _fail_queued call is scheduled (one at a time)
        self._fail_scheduled = False
        self.wake_sender: Callable[[], None] = lambda: None
        self._add_task: asyncio.Task[None] | None = None
        acc.on_fail = self._batch_failed

    # ------------------------------------------------------------ sender side (Gate)

    def may_send(self, tp: TopicPartition) -> bool:
        if self.state is not TxnState.IN_TRANSACTION:
            return False
        if self.abortable_error is not None:
            # a batch that was in flight when the transaction had to abort and came back for
            # a retry is queued again: fail what is queued now too (never sent, never waited)
            if not self._fail_scheduled:
                self._fail_scheduled = True
                asyncio.get_running_loop().call_soon(self._fail_queued, self.abortable_error)
            return False
        if tp in self.added:
            return True
        if tp not in self.pending:
            self.pending.add(tp)
            if self._add_task is None or self._add_task.done():
                self._add_task = asyncio.get_running_loop().create_task(
                    self._add_partitions(), name="txn-add-partitions"
                )
        return False

    def abortable(self, err: BaseException) -> None:
        """A send of the ongoing transaction failed: only abort_transaction() is allowed."""
        if self.abortable_error is None and self.state is not TxnState.READY:
            log.warning("transaction %s must abort: %s", self.transactional_id, err)
            self.abortable_error = err
            # queued batches can never be sent now (may_send is False): fail them at once
            # rather than at their delivery timeout (Kafka's abortUndrainedBatches); the
            # application awaiting them then aborts (seen: a copier held 120 s)
            self._fail_scheduled = True
            asyncio.get_running_loop().call_soon(self._fail_queued, err)

    def _fail_queued(self, err: BaseException) -> None:
        self._fail_scheduled = False
        if self.abortable_error is not err:
            return  # the transaction ended meanwhile
        self.acc.fail_queued(_abortable(err))

    def _batch_failed(self, batch: ProducerBatch, err: BaseException) -> None:
        if not isinstance(err, TransactionAbortedError):
            self.abortable(err)

    def check_can_send(self) -> None:
        if self.state is not TxnState.IN_TRANSACTION:
            raise errors.InvalidTxnStateError(
                f"send() needs an ongoing transaction (state {self.state.value}); "
                "call init_transactions() once, then begin_transaction()"
            )
        if self.abortable_error is not None:
            raise _abortable(self.abortable_error)

    async def _add_partitions(self) -> None:
        while self.pending and self.state is not TxnState.READY:
            tps = sorted(self.pending)
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            req = transaction_pb2.AddPartitionsToTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=self.seq.producer_id,
                producer_epoch=self.seq.epoch,
                partitions=[
                    transaction_pb2.TxnTopicPartitions(topic=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
            )
            try:
                resp = await self.coord.call(self.transactional_id, "AddPartitionsToTxn", req)
                self._raise_for(resp.error_code, resp.error_message)
                retry = False
                for r in resp.results:
                    tp = TopicPartition(r.topic, r.partition)
                    if r.error_code == ErrorCode.NONE:
                        self.pending.discard(tp)
                        self.added.add(tp)
                        continue
                    err = errors.error_for_code(r.error_code, f"AddPartitionsToTxn {tp}")
                    assert err is not None
                    if not err.retriable:
                        raise err
                    retry = True
                if not resp.results:  # an answer without per-partition results covers all
                    self.pending.difference_update(tps)
                    self.added.update(tps)
            except errors.HeadwaterError as exc:
                self._record(exc)
                return
            finally:
                self.wake_sender()
            if retry:
                await asyncio.sleep(self.backoff_s)

    def _record(self, exc: errors.HeadwaterError) -> None:
        if is_fatal(exc):
            self.seq.fail(exc)
        else:
            self.abortable(exc)

    @staticmethod
    def _raise_for(code: int, message: str) -> None:
        if code != ErrorCode.NONE:
            err = errors.error_for_code(code, message)
            assert err is not None
            raise err

    # ------------------------------------------------------------ application side

    async def init(self) -> None:
        """InitProducerId at the transaction coordinator (fences older incarnations)."""
        self.seq.check()
        if self.state is not TxnState.UNINITIALIZED:
            raise errors.InvalidTxnStateError("init_transactions() was already called")
        req = transaction_pb2.InitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self.timeout_ms,
            producer_id=-1,
            producer_epoch=-1,
        )
        resp = await self.coord.call(self.transactional_id, "InitProducerId", req)
        try:
            self._raise_for(resp.error_code, resp.error_message)
        except errors.HeadwaterError as exc:
            if is_fatal(exc):
                self.seq.fail(exc)
            raise
        self.seq.reset(resp.producer_id, resp.producer_epoch)
        self.state = TxnState.READY

    def begin(self) -> None:
        self.seq.check()
        self._check_unfinished(None)
        if self.state is not TxnState.READY:
            raise errors.InvalidTxnStateError(
                f"begin_transaction() in state {self.state.value} (needs init_transactions() "
                "and no ongoing transaction)"
            )
        self.added.clear()
        self.pending.clear()
        self.has_offsets = False
        self.abortable_error = None
        self.state = TxnState.IN_TRANSACTION

    def _require_ongoing(self, what: str) -> None:
        self.seq.check()
        if self.state is not TxnState.IN_TRANSACTION:
            raise errors.InvalidTxnStateError(f"{what} needs an ongoing transaction")

    async def send_offsets(self, offsets: Any, group_metadata: Any) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator."""
        self._require_ongoing("send_offsets_to_transaction()")
        if self.abortable_error is not None:
            raise _abortable(self.abortable_error)
        parsed = offsets_of(offsets)
        group_id, generation, member_id = group_fields(group_metadata)
        try:
            resp = await self.coord.call(
                self.transactional_id,
                "AddOffsetsToTxn",
                transaction_pb2.AddOffsetsToTxnRequest(
                    transactional_id=self.transactional_id,
                    producer_id=self.seq.producer_id,
                    producer_epoch=self.seq.epoch,
                    group_id=group_id,
                ),
            )
            self._raise_for(resp.error_code, resp.error_message)
            self.has_offsets = True
            req = coordinator_pb2.TxnOffsetCommitRequest(
                transactional_id=self.transactional_id,
                group_id=group_id,
                producer_id=self.seq.producer_id,
                producer_epoch=self.seq.epoch,
                generation_id=generation,
                member_id=member_id,
                partitions=[
                    coordinator_pb2.OffsetCommitPartition(
                        topic=tp.topic, partition=tp.partition, offset=off, leader_epoch=-1
                    )
                    for tp, off in sorted(parsed.items())
                ],
            )
            cresp = await self.groups.call(group_id, "TxnOffsetCommit", req)
            self._raise_for(cresp.error_code, cresp.error_message)
            for r in cresp.partitions:
                self._raise_for(r.error_code, r.error_message)
        except errors.HeadwaterError as exc:
            self._record(exc)
            raise

    def _check_unfinished(self, commit: bool | None) -> bool:
        """True when an EndTxn(``commit``) must be re-sent; raises when another outcome's
        EndTxn is unanswered (``commit`` None: begin_transaction())."""
        if self.unfinished is None:
            return False
        if self.unfinished is commit:
            return True
        name = "commit_transaction()" if self.unfinished else "abort_transaction()"
        raise errors.InvalidTxnStateError(
            f"the previous {name} was not answered (its outcome may already be being written):"
            f" call {name} again"
        )

    async def commit(self, flush: Callable[[], Any]) -> None:
        """Flush, then EndTxn(commit); raises the abortable error instead when a send failed.

        A retriable error (RequestTimedOutError: the coordinator writes the markers before
        answering, and a partition leader may be failing over) leaves the outcome unknown:
        call commit() again, which re-sends EndTxn(commit) (answered success once done)."""
        self.seq.check()
        if self._check_unfinished(True):
            await self._end(True)
            return
        self._require_ongoing("commit_transaction()")
        if self.abortable_error is None:
            await flush()
        self.seq.check()
        if self.abortable_error is not None:
            raise _abortable(self.abortable_error)
        await self._end(True)

    async def abort(self) -> None:
        """Drop queued batches, await in-flight ones, EndTxn(abort)."""
        self.seq.check()
        if self._check_unfinished(False):
            await self._end(False)
            return
        if self.state is not TxnState.IN_TRANSACTION:
            raise errors.InvalidTxnStateError("abort_transaction() needs an ongoing transaction")
        self.state = TxnState.ENDING  # the sender drains nothing more (may_send)
        dropped = TransactionAbortedError("the transaction was aborted before this was sent")
        if self._add_task is not None and not self._add_task.done():
            self._add_task.cancel()
            await asyncio.wait([self._add_task])
        self.pending.clear()
        while self.acc.incomplete:
            # queued batches (never sent, or waiting for a retry) are dropped; in-flight ones
            # are awaited (a retriable failure puts them back in a queue: dropped next round)
            self.acc.fail_queued(dropped)
            in_flight = self.acc.incomplete_done()
            if in_flight:
                self.wake_sender()
                await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
        await self._end(False)

    async def _end(self, commit: bool) -> None:
        self.state = TxnState.ENDING
        if not self.added and not self.has_offsets:
            self._finished()  # nothing reached the coordinator: nothing to end
            return
        req = transaction_pb2.EndTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.seq.producer_id,
            producer_epoch=self.seq.epoch,
            committed=commit,
        )
        try:
            resp = await self.coord.call(self.transactional_id, "EndTxn", req)
            self._raise_for(resp.error_code, resp.error_message)
        except errors.HeadwaterError as exc:
            if is_fatal(exc):
                self.unfinished = None
                self.seq.fail(exc)
            elif exc.retriable:
                # the coordinator may have this EndTxn (it answers once the markers are
                # written): only the same outcome may be asked for again
                self.unfinished = commit
                log.warning(
                    "transaction %s: EndTxn(%s) not answered (%s); the outcome is unknown until"
                    " it is re-sent", self.transactional_id, "commit" if commit else "abort", exc,
                )  # fmt: skip
            else:
                # a definite answer: the outcome is known again, any next step is allowed
                self.unfinished = None
                self.state = TxnState.IN_TRANSACTION  # the application may retry or abort
                if commit:
                    self.abortable(exc)
            raise
        self.seq.reset(resp.producer_id, resp.producer_epoch)  # KIP-890: the bumped epoch
        self._finished()

    def _finished(self) -> None:
        self.added.clear()
        self.pending.clear()
        self.has_offsets = False
        self.abortable_error = None
        self.unfinished = None
        self.state = TxnState.READY


def _abortable(err: BaseException) -> errors.HeadwaterError:
    exc = errors.InvalidTxnStateError(
        f"a send of this transaction failed ({err}); call abort_transaction()"
    )
    exc.__cause__ = err
    return exc
