"""Transaction administration, mixed into :class:`headwater.client.admin.AsyncAdminClient`.

``list_transactions`` asks every live coordinator (each lists the transactional ids of the
``__transaction_state`` partitions it owns) and merges, like ``list_groups``.
``describe_transactions`` asks each id's transaction coordinator (FindCoordinator with
``key_type=TRANSACTION``). Both are read-only: Kafka's ``kafka-transactions.sh list|describe``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from headwater import errors
from headwater.client.connection import ConnectionPool
from headwater.client.coordinator_client import CoordinatorClient
from headwater.client.metadata import Metadata
from headwater.client.types import TopicPartition
from headwater.v1 import coordinator_pb2 as cpb
from headwater.v1 import transaction_pb2 as tpb
from headwater.v1 import transaction_pb2_grpc as tgrpc


def state_name(state: int) -> str:
    """``TXN_PREPARE_COMMIT`` -> ``PrepareCommit`` (Kafka's spelling)."""
    words = tpb.TransactionState.Name(state).removeprefix("TXN_").split("_")
    return "".join(w.capitalize() for w in words)


@dataclass(frozen=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int  # -1 unless a transaction is open
    partitions: tuple[TopicPartition, ...]
    groups: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "transactional_id": self.transactional_id,
            "state": self.state,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "timeout_ms": self.timeout_ms,
            "start_ms": self.start_ms,
            "partitions": [{"topic": t, "partition": p} for t, p in self.partitions],
            "groups": list(self.groups),
        }


class TransactionAdminMixin:
    """Transaction operations; the host provides ``_pool``, ``_metadata``, ``timeout_s``."""

    _pool: ConnectionPool
    _metadata: Metadata
    timeout_s: float
    _txn_coordinators: CoordinatorClient | None = None

    def _txn_stub(self, address: str) -> tgrpc.TransactionCoordinatorStub:
        return tgrpc.TransactionCoordinatorStub(self._pool.channel(address))

    async def list_transactions(self, states: Iterable[str] = ()) -> list[ListedTransaction]:
        """Every transactional id known to any live coordinator (optionally only in
        ``states``, Kafka's names: Empty, Ongoing, PrepareCommit, ...)."""
        by_name = {state_name(v): v for v in tpb.TransactionState.values()}
        wanted = []
        for s in states:
            if s not in by_name:
                raise errors.InvalidRequestError(f"unknown transaction state {s!r}")
            wanted.append(by_name[s])
        view = await self._metadata.refresh()
        if not view.coordinators:
            raise errors.CoordinatorNotAvailableError("no coordinator is registered")
        req = tpb.ListTransactionsRequest(states=wanted)

        async def one(address: str) -> tpb.ListTransactionsResponse:
            return await self._txn_stub(address).ListTransactions(req, timeout=self.timeout_s)

        results = await asyncio.gather(*(one(a) for a in view.coordinators), return_exceptions=True)
        found: dict[str, ListedTransaction] = {}
        answered, last = 0, None
        for r in results:
            if isinstance(r, grpc.RpcError):
                last = errors.from_rpc_error(r)
                continue
            if isinstance(r, BaseException):
                raise r
            if r.error_code:
                last = errors.error_for_code(r.error_code)
                continue
            answered += 1
            for t in r.transactions:
                found[t.transactional_id] = ListedTransaction(
                    t.transactional_id, t.producer_id, state_name(t.state)
                )
        if not answered and last is not None:
            raise last
        return [found[k] for k in sorted(found)]

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> list[TransactionDescription]:
        """State, producer id/epoch, open partitions and groups of each id; an id the
        coordinator does not know raises INVALID_PRODUCER_ID_MAPPING (Kafka's
        TransactionalIdNotFound)."""
        if self._txn_coordinators is None:
            self._txn_coordinators = CoordinatorClient(
                self._pool,
                self._metadata,
                timeout_s=self.timeout_s,
                backoff_s=0.1,
                key_type=cpb.TRANSACTION,
                stub=self._txn_stub,
            )
        coord = self._txn_coordinators
        out = []
        for tid in transactional_ids:
            req = tpb.DescribeTransactionsRequest(transactional_ids=[tid])
            deadline = time.monotonic() + self.timeout_s
            while True:  # the answer's error is per id: coordinator moves are retried here
                (t,) = (await coord.call(tid, "DescribeTransactions", req)).transactions
                err = errors.error_for_code(t.error_code, f"transactional id {tid!r}")
                if err is None:
                    break
                if not err.retriable or time.monotonic() >= deadline:
                    raise err
                coord.forget(tid)
                await asyncio.sleep(0.1)
            out.append(
                TransactionDescription(
                    transactional_id=t.transactional_id,
                    state=state_name(t.state),
                    producer_id=t.producer_id,
                    producer_epoch=t.producer_epoch,
                    timeout_ms=t.transaction_timeout_ms,
                    start_ms=t.transaction_start_ms,
                    partitions=tuple(
                        TopicPartition(p.topic, n) for p in t.partitions for n in p.partitions
                    ),
                    groups=tuple(t.groups),
                )
            )
        return out
