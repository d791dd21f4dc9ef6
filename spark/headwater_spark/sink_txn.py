"""The exactly-once streaming sink (``writeStream ... .option("exactlyOnce", "true")``).

docs/spark.md, "Exactly-once streaming sink". Who does what, for micro-batch ``b``:

* **Executor task, Spark partition k** (:func:`write_transactional`): a transactional producer
  with ``transactional_id = f"{transactionalIdPrefix}-{k}"``; ``init_transactions()`` (fences
  any earlier attempt of the id and aborts its open transaction), ``begin_transaction()``,
  send the rows, flush — and **no commit**: the task returns a :class:`TxnMessage` carrying the
  :class:`~headwater.client.txn_handoff.TxnHandle` (id, producer id, epoch) and closes the
  producer (close neither commits nor aborts).
* **Driver commit(messages, b)**: writes the decision record for (prefix, b) listing every
  handle to the decision topic (:mod:`headwater_spark.decisions`) — **the commit point** — then
  sends EndTxn(commit) for each handle (retried; a resend of a completed commit is answered
  success). Only then does Spark record ``b`` in the checkpoint's commit log.
* **Driver abort(messages, b)**: EndTxn(abort) for each handle, errors ignored (the next
  ``init_transactions()`` of the id fences and aborts anyway). Never for a replayed decision.
* **Re-run of b after a restart**: the writer shipped to executors carries the query's latest
  decision, read on the driver when the writer is pickled for the executors
  (:meth:`HeadwaterTxnStreamWriter.__getstate__`, once per query run). If it is for ``b``, the
  task writes nothing, does not call ``init_transactions()`` (which would abort the decided
  transaction), and returns the recorded handle with ``replayed=True``; the driver's commit
  re-sends the EndTxns. This closes the window where the driver died between the decision and
  the last EndTxn.

The batch id and partition come from the task's Spark context (local property
``streaming.sql.batchId``, ``partitionId()``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from headwater import errors
from headwater.client import AsyncProducer
from headwater.client.txn_handoff import TxnHandle, end_transaction, handle_of
from headwater_spark import decisions
from headwater_spark.options import SinkOptions, parse_sink_options
from headwater_spark.sink import _send_batch, validate_schema
from headwater_spark.worker_loop import run as _run

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class TxnMessage(WriterCommitMessage):
    """One task's transaction for micro-batch ``batch_id`` (None: the task's id has no open
    transaction — it wrote no row, or a replayed decision lists none for it)."""

    batch_id: int
    partition_id: int
    records: int
    handle: TxnHandle | None
    replayed: bool


def transactional_id(prefix: str, partition_id: int) -> str:
    return f"{prefix}-{partition_id}"


async def _open(opts: SinkOptions, tid: str) -> AsyncProducer:
    producer = AsyncProducer(
        opts.bootstrap,
        acks="all",
        linger_ms=opts.linger_ms,
        transactional_id=tid,
        transaction_timeout_ms=opts.txn_timeout_ms,
        security=opts.security.client_security(),
    )
    try:
        await producer.init_transactions()
        producer.begin_transaction()
    except BaseException:
        await producer.close()
        raise
    return producer


async def _seal(producer: AsyncProducer, futures: list[Any]) -> TxnHandle:
    await producer.flush()
    for f in futures:
        await f
    return handle_of(producer)


async def _give_up(producer: AsyncProducer, tid: str) -> None:
    try:
        await producer.abort_transaction()
    except Exception as exc:  # the next init_transactions() of the id fences anyway
        log.warning("abort of %s after a failed write failed: %s", tid, exc)


def _write_open(opts: SinkOptions, tid: str, batches: Iterator[pa.RecordBatch]) -> TxnMessage:
    """Send every row in an open transaction of ``tid``; flushed, never committed here.
    Spark's iterator is read on the task's thread; client calls run on the worker's loop."""
    producer = _run(_open(opts, tid))
    count = 0
    futures: list[Any] = []
    try:
        for rb in batches:
            count += rb.num_rows
            futures.extend(_run(_send_batch(producer, rb, opts)))
        handle = _run(_seal(producer, futures))
    except BaseException:
        _run(_give_up(producer, tid))
        raise
    finally:
        _run(producer.close())
    return TxnMessage(-1, -1, count, handle, False)


def write_transactional(
    opts: SinkOptions,
    pending: decisions.Decision | None,
    batch_id: int,
    partition_id: int,
    batches: Iterator[pa.RecordBatch],
) -> TxnMessage:
    """The executor side of one task (see the module docstring)."""
    assert opts.txn_prefix is not None
    tid = transactional_id(opts.txn_prefix, partition_id)
    if pending is not None and pending.batch == batch_id:
        for _ in batches:  # decided before a restart: the rows are in the transaction already
            pass
        recorded = {h.transactional_id: h for h in pending.txns}
        return TxnMessage(batch_id, partition_id, 0, recorded.get(tid), True)
    msg = _write_open(opts, tid, batches)
    return TxnMessage(batch_id, partition_id, msg.records, msg.handle, False)


def _end_all(opts: SinkOptions, handles: list[TxnHandle], commit: bool) -> list[BaseException]:
    security = opts.security.client_security()

    async def all_of() -> list[Any]:
        return await asyncio.gather(
            *(
                end_transaction(opts.bootstrap, h, commit=commit, security=security)
                for h in handles
            ),
            return_exceptions=True,
        )

    return [r for r in _run(all_of()) if isinstance(r, BaseException)]


def commit_batch(
    opts: SinkOptions, messages: list[WriterCommitMessage | None], batch_id: int
) -> None:
    """Driver: decide (write the decision record), then commit every transaction."""
    assert opts.txn_prefix is not None
    msgs = _messages(messages, batch_id)
    handles = [m.handle for m in msgs if m.handle is not None and m.handle.has_partitions]
    if not all(m.replayed for m in msgs):
        decision = decisions.Decision(batch_id, tuple(handles))
        decisions.write_decision(
            opts.bootstrap,
            opts.commit_topic,
            opts.txn_prefix,
            decision,
            opts.security.client_security(),
        )
    failed = _end_all(opts, handles, True)
    if failed:
        raise errors.InvalidTxnStateError(
            f"micro-batch {batch_id} of {opts.txn_prefix} is decided but {len(failed)} of "
            f"{len(handles)} transactions did not commit (first: {failed[0]}); a restart of "
            "the query re-sends the commits"
        ) from failed[0]
    log.info(
        "headwater sink: micro-batch %d committed (%d records, %d transactions)",
        batch_id,
        sum(m.records for m in msgs),
        len(handles),
    )


def abort_batch(
    opts: SinkOptions, messages: list[WriterCommitMessage | None], batch_id: int
) -> None:
    """Driver: abort every transaction of a failed micro-batch — never a decided one. Spark
    also calls abort when commit() raised, possibly after the decision was written: the
    decision topic is checked first, and a decided micro-batch is left for the restart."""
    assert opts.txn_prefix is not None
    msgs = [m for m in messages if isinstance(m, TxnMessage) and m.batch_id == batch_id]
    if any(m.replayed for m in msgs):
        log.warning("micro-batch %d was decided before a restart: not aborting it", batch_id)
        return
    handles = [m.handle for m in msgs if m.handle is not None]
    if not handles:
        return
    decided = decisions.latest_decision(
        opts.bootstrap, opts.commit_topic, opts.txn_prefix, opts.security.client_security()
    )
    if decided is not None and decided.batch == batch_id:
        log.warning("micro-batch %d is decided: not aborting it (a restart commits it)", batch_id)
        return
    for exc in _end_all(opts, handles, False):
        log.warning("abort of micro-batch %d: %s (the next run fences it)", batch_id, exc)


def _messages(messages: list[WriterCommitMessage | None], batch_id: int) -> list[TxnMessage]:
    out = []
    for m in messages:
        if not isinstance(m, TxnMessage) or m.batch_id != batch_id:
            raise errors.InvalidRequestError(
                f"commit of micro-batch {batch_id} got an unexpected message {m!r}"
            )
        out.append(m)
    return out


def _task_ids() -> tuple[int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    raw = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
    if ctx is None or raw is None:
        raise errors.InvalidRequestError(
            "exactlyOnce: no micro-batch id in the task context (only writeStream can use it)"
        )
    return int(raw), ctx.partitionId()


class HeadwaterTxnStreamWriter(DataSourceStreamArrowWriter):
    """See the module docstring."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.opts = parse_sink_options(options)
        assert self.opts.exactly_once
        validate_schema(schema, self.opts)
        self.pending: decisions.Decision | None = None
        self._looked_up = False

    def __getstate__(self) -> dict[str, Any]:
        # Pickled only to ship the writer to executors (at query start, on the driver):
        # the latest decision goes with it. Commit/abort writers are never pickled.
        if not self._looked_up:
            assert self.opts.txn_prefix is not None
            self.pending = decisions.latest_decision(
                self.opts.bootstrap,
                self.opts.commit_topic,
                self.opts.txn_prefix,
                self.opts.security.client_security(),
            )
            self._looked_up = True
        return dict(self.__dict__)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        batch_id, partition_id = _task_ids()
        return write_transactional(self.opts, self.pending, batch_id, partition_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        commit_batch(self.opts, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort_batch(self.opts, messages, batchId)
