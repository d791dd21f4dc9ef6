"""Handing an open transaction from the process that wrote it to one that ends it.

docs/transactions.md: ``EndTxn(transactional_id, producer_id, producer_epoch, committed)`` may
be sent by any process that knows the triple. A writer (e.g. a Spark task) sends its records
inside a transaction, flushes, and hands the :class:`TxnHandle` to a committer (e.g. the Spark
driver), which decides and then calls :func:`end_transaction`. Used by
``headwater_spark.sink_txn`` (the exactly-once streaming sink).

Contracts:

* :func:`handle_of` reads the producer's current id/epoch and whether the ongoing transaction
  reached the coordinator (a partition was added). Call it after ``flush()``: every record of
  the transaction is then written to its partition. ``AsyncProducer.close()`` neither commits
  nor aborts, so closing the producer afterwards leaves the transaction open for the handle's
  holder (or the coordinator's ``transaction_timeout_ms``, which aborts it).
* :func:`end_transaction` sends EndTxn until it gets an answer other than a retriable one
  (CONCURRENT_TRANSACTIONS, coordinator moves: retried by :class:`CoordinatorClient`; transport
  errors: retried here until ``timeout_s``). A resend at the same epoch after the transaction
  completed the same way is answered success (the coordinator's retry rule), so ending twice
  is safe. PRODUCER_FENCED means the transaction was ended otherwise (a newer
  ``init_transactions()`` of the id, or the coordinator's timeout aborted it): raised as
  :class:`headwater.errors.ProducerFencedError`.
* A handle with ``has_partitions=False`` never reached the coordinator; there is nothing to end
  and :func:`end_transaction` returns at once (EndTxn would answer INVALID_TXN_STATE).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from headwater import errors
from headwater.client.connection import ConnectionPool, parse_bootstrap
from headwater.client.coordinator_client import CoordinatorClient
from headwater.client.metadata import Metadata
from headwater.client.producer import AsyncProducer
from headwater.client.security import ClientSecurity
from headwater.v1 import coordinator_pb2, transaction_pb2, transaction_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode


@dataclass(frozen=True)
class TxnHandle:
    """Enough to end one open transaction from any process (picklable)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    has_partitions: bool


def handle_of(producer: AsyncProducer) -> TxnHandle:
    """The ongoing transaction of ``producer`` (raises InvalidTxnStateError if none)."""
    txn = producer._txn
    seq = producer._seq
    if txn is None or seq is None or producer.transactional_id is None:
        raise errors.InvalidTxnStateError("the producer has no initialized transactional_id")
    if txn.state.value != "in_transaction":
        raise errors.InvalidTxnStateError(f"no ongoing transaction (state {txn.state.value})")
    if txn.abortable_error is not None:
        raise errors.InvalidTxnStateError(
            f"a send of this transaction failed: {txn.abortable_error}"
        ) from txn.abortable_error
    seq.check()
    return TxnHandle(
        producer.transactional_id, seq.producer_id, seq.epoch, bool(txn.added or txn.pending)
    )


async def end_transaction(
    bootstrap: str | list[str],
    handle: TxnHandle,
    *,
    commit: bool,
    timeout_s: float = 120.0,
    backoff_s: float = 0.2,
    security: ClientSecurity | None = None,
) -> None:
    """EndTxn(commit or abort) for ``handle`` (see the module docstring); ``security``: the
    TLS / SCRAM settings of the connections (None: the process default)."""
    if not handle.has_partitions:
        return
    pool = ConnectionPool(security=security)
    md = Metadata(pool, parse_bootstrap(bootstrap))
    coord = CoordinatorClient(
        pool,
        md,
        timeout_s=min(30.0, timeout_s),
        backoff_s=backoff_s,
        key_type=coordinator_pb2.TRANSACTION,
        stub=lambda a: transaction_pb2_grpc.TransactionCoordinatorStub(pool.channel(a)),
        retry_same=(ErrorCode.CONCURRENT_TRANSACTIONS,),
    )
    req = transaction_pb2.EndTxnRequest(
        transactional_id=handle.transactional_id,
        producer_id=handle.producer_id,
        producer_epoch=handle.producer_epoch,
        committed=commit,
    )
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                resp = await coord.call(handle.transactional_id, "EndTxn", req)
            except errors.HeadwaterError as exc:
                if not exc.retriable or time.monotonic() + backoff_s >= deadline:
                    raise
                await asyncio.sleep(backoff_s)
                continue
            if resp.error_code == ErrorCode.NONE:
                return
            err = errors.error_for_code(
                resp.error_code,
                f"EndTxn({'commit' if commit else 'abort'}) {handle}: {resp.error_message}",
            )
            assert err is not None
            if not err.retriable or time.monotonic() + backoff_s >= deadline:
                raise err
            await asyncio.sleep(backoff_s)
    finally:
        await md.close()
        await pool.close()
