"""The transaction coordinator's state machine: pure handlers over a :class:`TxnTable`.

Each handler returns ``(Outcome, [MarkerJob])``: the records to persist (the runtime appends
and reads them back before answering, log_runtime.py) and the marker writes to start once
they are durable. Transitions (docs/transactions.md)::

    Empty/CompleteCommit/CompleteAbort --AddPartitions/AddOffsets--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written (complete)--> CompleteCommit
    Ongoing --EndTxn(abort) | timeout (tick) | InitProducerId--> PrepareAbort --> CompleteAbort

Epochs (KIP-890): Prepare* moves ``producer_epoch`` to the transaction's epoch + 1 (the
markers' epoch) and records the transaction's own epoch as ``last_producer_epoch``; EndTxn is
parked under ``WaitKey(Wait.END_TXN, transactional_id)`` and answered by :func:`complete` with the
bumped epoch. Requests at any other epoch than the current get PRODUCER_FENCED and change
nothing, except an EndTxn retried at ``last_producer_epoch``: CONCURRENT_TRANSACTIONS while
the same transaction is still Prepare*, success when it completed the same way. Producer ids
come pre-allocated in ``TxnCtx.new_producer_id`` (:func:`needs_new_pid` tells the runtime when
one is needed: a new transactional.id, or an epoch that would pass ``MAX_EPOCH``).

Requests are typed — the RPCs' protobuf requests, and the internal :class:`MarkerJob` (its
markers are written: :func:`complete`) — and each type's handler is registered in
:data:`HANDLERS` (services/coordinator/handlers.py) with its in-band error answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from headwater.v1 import transaction_pb2 as tpb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator.handlers import Registry, whole
from services.coordinator.outcome import Outcome, Wait, WaitKey
from services.coordinator.txn.state import MAX_EPOCH, TxnMetadata, TxnState, TxnTable

#: The transaction timeout of an InitProducerId that leaves transaction_timeout_ms 0 (Kafka's
#: transaction.timeout.ms default), lowered to the largest allowed when that is smaller.
DEFAULT_TIMEOUT_MS = 60_000
DEFAULT_MAX_TIMEOUT_MS = 15 * 60 * 1000


@dataclass(frozen=True)
class MarkerJob:
    """Write the outcome of one transaction to its partitions' leaders and groups'
    coordinators at the bumped ``producer_epoch``, then :func:`complete` it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: frozenset[tuple[str, int]]
    groups: frozenset[str]


@dataclass
class TxnCtx:
    now_ms: int
    epoch: int  # the ownership epoch of the partition: records' header, markers' coordinator epoch
    max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS
    new_producer_id: int = -1


Result = tuple[Outcome, list[MarkerJob]]


def end_key(txn_id: str) -> WaitKey:
    return WaitKey(Wait.END_TXN, txn_id)


def needs_new_pid(table: TxnTable, request: object) -> bool:
    """Whether the handler of ``request`` needs ``TxnCtx.new_producer_id`` allocated."""
    match request:
        case tpb.InitProducerIdRequest():
            meta = table.txns.get(request.transactional_id)
            return meta is None or meta.producer_epoch + 2 > MAX_EPOCH
        case tpb.EndTxnRequest():
            meta = table.txns.get(request.transactional_id)
            return meta is not None and meta.producer_epoch + 1 >= MAX_EPOCH
    return False


def _fail(resp_type: type, code: int, msg: str) -> Result:
    return Outcome(response=resp_type(error_code=code, error_message=msg)), []


def _check(meta: TxnMetadata | None, txn_id: str, pid: int, epoch: int) -> tuple[int, str]:
    if not txn_id:
        return ErrorCode.INVALID_REQUEST, "transactional_id is required"
    if meta is None or pid != meta.producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING, f"producer id {pid} is not {txn_id!r}'s"
    if epoch != meta.producer_epoch:
        return ErrorCode.PRODUCER_FENCED, f"epoch {epoch} is not the current {meta.producer_epoch}"
    return ErrorCode.NONE, ""


def _prepare(meta: TxnMetadata, commit: bool, ctx: TxnCtx) -> tuple[TxnMetadata, MarkerJob]:
    bumped = meta.producer_epoch + 1
    nxt = ctx.new_producer_id if bumped >= MAX_EPOCH else -1
    state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    new = meta.with_(
        producer_epoch=bumped,
        last_producer_epoch=meta.producer_epoch,
        next_producer_id=nxt,
        state=state,
        update_ms=ctx.now_ms,
    )
    return new, job_of(new)


def job_of(meta: TxnMetadata) -> MarkerJob:
    return MarkerJob(
        meta.transactional_id,
        meta.producer_id,
        meta.producer_epoch,
        meta.state is TxnState.PREPARE_COMMIT,
        meta.partitions,
        meta.groups,
    )


def init_producer_id(table: TxnTable, req: tpb.InitProducerIdRequest, ctx: TxnCtx) -> Result:
    R = tpb.InitProducerIdResponse
    if not req.transactional_id:
        return _fail(R, ErrorCode.INVALID_REQUEST, "transactional_id is required here")
    # 0 (unset): the default, within the configured largest
    timeout_ms = req.transaction_timeout_ms or min(DEFAULT_TIMEOUT_MS, ctx.max_timeout_ms)
    if not 1 <= timeout_ms <= ctx.max_timeout_ms:
        return _fail(
            R,
            ErrorCode.INVALID_TRANSACTION_TIMEOUT,
            f"transaction_timeout_ms must be 1..{ctx.max_timeout_ms} (0: the default)",
        )
    meta = table.txns.get(req.transactional_id)
    if meta is not None and req.producer_id >= 0:  # KIP-360: the caller names itself
        known = (meta.producer_epoch, meta.last_producer_epoch)
        if req.producer_id != meta.producer_id or req.producer_epoch not in known:
            return _fail(R, ErrorCode.PRODUCER_FENCED, "a newer producer has this id")
    if meta is not None and meta.state.preparing:
        return _fail(R, ErrorCode.CONCURRENT_TRANSACTIONS, "transaction is completing")
    if meta is not None and meta.state is TxnState.ONGOING:
        aborting, job = _prepare(meta, False, ctx)
        out = Outcome(records=[aborting.record(ctx.epoch)])
        out.response = R(
            error_code=ErrorCode.CONCURRENT_TRANSACTIONS,
            error_message="aborting the previous incarnation's transaction; retry",
        )
        return out, [job]
    if meta is None or meta.producer_epoch + 2 > MAX_EPOCH:
        assert ctx.new_producer_id >= 0, "runtime must pre-allocate (needs_new_pid)"
        pid, epoch, last = ctx.new_producer_id, 0, -1
    else:
        pid, epoch, last = meta.producer_id, meta.producer_epoch + 1, meta.producer_epoch
    new = TxnMetadata(
        transactional_id=req.transactional_id,
        producer_id=pid,
        producer_epoch=epoch,
        last_producer_epoch=last,
        timeout_ms=timeout_ms,
        state=TxnState.EMPTY,
        update_ms=ctx.now_ms,
    )
    return Outcome(
        records=[new.record(ctx.epoch)], response=R(producer_id=pid, producer_epoch=epoch)
    ), []


def _begin(meta: TxnMetadata, ctx: TxnCtx) -> TxnMetadata:
    """``meta`` as Ongoing: unchanged when it is, else a new transaction starting now."""
    if meta.state is TxnState.ONGOING:
        return meta.with_(update_ms=ctx.now_ms)
    return meta.with_(
        state=TxnState.ONGOING,
        start_ms=ctx.now_ms,
        update_ms=ctx.now_ms,
        partitions=frozenset(),
        groups=frozenset(),
    )


def add_partitions(table: TxnTable, req: tpb.AddPartitionsToTxnRequest, ctx: TxnCtx) -> Result:
    R = tpb.AddPartitionsToTxnResponse
    meta = table.txns.get(req.transactional_id)
    code, msg = _check(meta, req.transactional_id, req.producer_id, req.producer_epoch)
    if code == ErrorCode.NONE and meta is not None and meta.state.preparing:
        code, msg = ErrorCode.CONCURRENT_TRANSACTIONS, "the previous transaction is completing"
    wanted = [(tp.topic, p) for tp in req.partitions for p in tp.partitions]
    if code == ErrorCode.NONE and any(not t or p < 0 for t, p in wanted):
        code, msg = ErrorCode.INVALID_REQUEST, "bad topic or partition"
    if code != ErrorCode.NONE:
        resp = R(error_code=code, error_message=msg)  # type: ignore[arg-type]
        resp.results.extend(
            tpb.AddPartitionsToTxnResult(topic=t, partition=p, error_code=code)  # type: ignore[arg-type]
            for t, p in wanted
        )
        return Outcome(response=resp), []
    assert meta is not None
    resp = R(results=[tpb.AddPartitionsToTxnResult(topic=t, partition=p) for t, p in wanted])
    if meta.state is TxnState.ONGOING and set(wanted) <= meta.partitions:
        return Outcome(response=resp), []  # nothing new: no record
    base = _begin(meta, ctx)
    new = base.with_(partitions=base.partitions | frozenset(wanted))
    return Outcome(records=[new.record(ctx.epoch)], response=resp), []


def add_offsets(table: TxnTable, req: tpb.AddOffsetsToTxnRequest, ctx: TxnCtx) -> Result:
    R = tpb.AddOffsetsToTxnResponse
    meta = table.txns.get(req.transactional_id)
    code, msg = _check(meta, req.transactional_id, req.producer_id, req.producer_epoch)
    if code == ErrorCode.NONE and meta is not None and meta.state.preparing:
        code, msg = ErrorCode.CONCURRENT_TRANSACTIONS, "the previous transaction is completing"
    if code == ErrorCode.NONE and (not req.group_id or "\x00" in req.group_id):
        code, msg = ErrorCode.INVALID_GROUP_ID, "invalid group id"
    if code != ErrorCode.NONE:
        return _fail(R, code, msg)
    assert meta is not None
    if meta.state is TxnState.ONGOING and req.group_id in meta.groups:
        return Outcome(response=R()), []
    base = _begin(meta, ctx)
    new = base.with_(groups=base.groups | {req.group_id})
    return Outcome(records=[new.record(ctx.epoch)], response=R()), []


def end_txn(table: TxnTable, req: tpb.EndTxnRequest, ctx: TxnCtx) -> Result:
    R = tpb.EndTxnResponse
    meta = table.txns.get(req.transactional_id)
    if (
        meta is not None
        and req.producer_id == meta.producer_id
        and req.producer_epoch == meta.last_producer_epoch
        and meta.producer_epoch == meta.last_producer_epoch + 1
    ):  # a retry of the EndTxn that ended (or is ending) the last transaction
        done = TxnState.COMPLETE_COMMIT if req.committed else TxnState.COMPLETE_ABORT
        prep = TxnState.PREPARE_COMMIT if req.committed else TxnState.PREPARE_ABORT
        if meta.state is done:
            return Outcome(
                response=R(producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
            ), []
        if meta.state is prep:
            return _fail(R, ErrorCode.CONCURRENT_TRANSACTIONS, "transaction is completing")
        return _fail(R, ErrorCode.PRODUCER_FENCED, f"epoch {req.producer_epoch} has ended")
    code, msg = _check(meta, req.transactional_id, req.producer_id, req.producer_epoch)
    if code != ErrorCode.NONE:
        return _fail(R, code, msg)
    assert meta is not None
    if meta.state.preparing:
        return _fail(R, ErrorCode.CONCURRENT_TRANSACTIONS, "transaction is completing")
    if meta.state is not TxnState.ONGOING:
        return _fail(R, ErrorCode.INVALID_TXN_STATE, f"no transaction is open ({meta.state.value})")
    new, job = _prepare(meta, req.committed, ctx)
    return Outcome(records=[new.record(ctx.epoch)], wait=end_key(meta.transactional_id)), [job]


def complete(table: TxnTable, job: MarkerJob, ctx: TxnCtx) -> Result:
    """Every marker of ``job`` is written: persist Complete* and answer the parked EndTxn."""
    meta = table.txns.get(job.transactional_id)
    if (
        meta is None
        or not meta.state.preparing
        or (meta.producer_id, meta.producer_epoch) != (job.producer_id, job.producer_epoch)
    ):
        return Outcome(), []  # completed already (a duplicate job)
    state = TxnState.COMPLETE_COMMIT if job.committed else TxnState.COMPLETE_ABORT
    new = meta.with_(
        state=state, partitions=frozenset(), groups=frozenset(), start_ms=-1, update_ms=ctx.now_ms
    )
    if meta.next_producer_id >= 0:
        new = new.with_(
            producer_id=meta.next_producer_id,
            producer_epoch=0,
            last_producer_epoch=-1,
            next_producer_id=-1,
        )
    resp = tpb.EndTxnResponse(producer_id=new.producer_id, producer_epoch=new.producer_epoch)
    out = Outcome(records=[new.record(ctx.epoch)])
    out.replies.append((end_key(job.transactional_id), resp))
    return out, []


def tick(table: TxnTable, ctx: TxnCtx) -> Result:
    """Abort every Ongoing transaction open longer than its timeout."""
    out, jobs = Outcome(), []
    for meta in list(table.txns.values()):
        if meta.state is TxnState.ONGOING and meta.start_ms + meta.timeout_ms <= ctx.now_ms:
            if meta.producer_epoch + 1 >= MAX_EPOCH and ctx.new_producer_id < 0:
                continue  # the runtime allocates an id first (as needs_new_pid of an EndTxn)
            new, job = _prepare(meta, False, ctx)
            out.records.append(new.record(ctx.epoch))
            jobs.append(job)
    return out, jobs


def preparing_jobs(table: TxnTable) -> list[MarkerJob]:
    """The marker jobs of every Prepare* transaction (to finish after a load)."""
    return [job_of(m) for _, m in sorted(table.txns.items()) if m.state.preparing]


def _tps(tps: Iterable[tuple[str, int]]) -> list[tpb.TxnTopicPartitions]:
    by: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by.setdefault(t, []).append(p)
    return [tpb.TxnTopicPartitions(topic=t, partitions=ps) for t, ps in by.items()]


def describe(table: TxnTable, txn_id: str) -> tpb.DescribedTransaction:
    meta = table.txns.get(txn_id)
    if meta is None:
        return tpb.DescribedTransaction(
            transactional_id=txn_id, error_code=ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )
    return tpb.DescribedTransaction(
        transactional_id=txn_id,
        state=meta.state.proto,  # type: ignore[arg-type]
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        transaction_timeout_ms=meta.timeout_ms,
        transaction_start_ms=meta.start_ms if meta.state is TxnState.ONGOING else -1,
        partitions=_tps(meta.partitions),
        groups=sorted(meta.groups),
    )


def list_txns(table: TxnTable, states: Iterable[int]) -> list[tpb.ListedTransaction]:
    wanted = set(states)
    return [
        tpb.ListedTransaction(
            transactional_id=tid,
            producer_id=m.producer_id,
            state=m.state.proto,  # type: ignore[arg-type]
        )
        for tid, m in sorted(table.txns.items())
        if not wanted or m.state.proto in wanted
    ]


def _describe(table: TxnTable, req: tpb.DescribeTransactionsRequest, ctx: TxnCtx) -> Result:
    return Outcome(response=[describe(table, tid) for tid in req.transactional_ids]), []


def _list(table: TxnTable, req: tpb.ListTransactionsRequest, ctx: TxnCtx) -> Result:
    txns = list_txns(table, req.states)
    return Outcome(response=tpb.ListTransactionsResponse(transactions=txns)), []


#: The requests of a producer's transaction: after each, the runtime makes sure a Prepare*
#: transaction has its marker task (txn/runtime.py).
TXN_REQUESTS = (
    tpb.InitProducerIdRequest,
    tpb.AddPartitionsToTxnRequest,
    tpb.AddOffsetsToTxnRequest,
    tpb.EndTxnRequest,
)

HANDLERS: Registry[TxnTable, TxnCtx, Result] = Registry("transaction coordinator")
HANDLERS.add(tpb.InitProducerIdRequest, init_producer_id, whole(tpb.InitProducerIdResponse))
HANDLERS.add(tpb.AddPartitionsToTxnRequest, add_partitions, whole(tpb.AddPartitionsToTxnResponse))
HANDLERS.add(tpb.AddOffsetsToTxnRequest, add_offsets, whole(tpb.AddOffsetsToTxnResponse))
HANDLERS.add(tpb.EndTxnRequest, end_txn, whole(tpb.EndTxnResponse))
HANDLERS.add(
    tpb.DescribeTransactionsRequest,
    _describe,
    lambda r, code, _m: [
        tpb.DescribedTransaction(transactional_id=t, error_code=code)  # type: ignore[arg-type]
        for t in r.transactional_ids
    ],
)
HANDLERS.add(
    tpb.ListTransactionsRequest,
    _list,
    lambda _r, code, _m: tpb.ListTransactionsResponse(error_code=code),  # type: ignore[arg-type]
)
HANDLERS.add(MarkerJob, complete)  # internal: posted by the marker task when it is done
