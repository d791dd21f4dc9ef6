"""The TransactionCoordinator gRPC servicer: routes each transactional.id to its runtime.

A transactional.id lives in ``__transaction_state`` partition
``partition_for(transactional_id, P)`` (unsigned CRC32C mod P, as for groups). A request for
a partition this process does not own is answered NOT_COORDINATOR in-band (clients find the
owner with GroupCoordinator.FindCoordinator, key_type TRANSACTION). ListTransactions covers
the partitions owned here (clients merge over coordinators). Stateless: runtimes are owned by
the transaction :class:`Ownership` (same loop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from headwater.v1 import transaction_pb2 as tpb
from headwater.v1 import transaction_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import ownership as own
from services.coordinator.handlers import PartitionLostError
from services.coordinator.txn.handlers import HANDLERS
from services.coordinator.txn.runtime import not_coordinator


class TransactionCoordinatorServicer(transaction_pb2_grpc.TransactionCoordinatorServicer):
    """See the module docstring."""

    def __init__(self, ownership: Callable[[], own.Ownership | None], partitions: int) -> None:
        self._ownership = ownership
        self.partitions = partitions

    def _runtime(self, txn_id: str) -> Any:
        o = self._ownership()
        if o is None:
            return None
        return o.runtimes.get(own.partition_for(txn_id, self.partitions))

    async def _route(self, txn_id: str, request: object) -> Any:
        if not txn_id or "\x00" in txn_id:
            return HANDLERS.error(request, ErrorCode.INVALID_REQUEST, "invalid transactional_id")
        rt = self._runtime(txn_id)
        if rt is None:
            return not_coordinator(request)
        try:
            return await rt.submit(request)
        except PartitionLostError:
            return not_coordinator(request)

    async def InitProducerId(self, request: tpb.InitProducerIdRequest, context: Any) -> Any:
        return await self._route(request.transactional_id, request)

    async def AddPartitionsToTxn(self, request: tpb.AddPartitionsToTxnRequest, context: Any) -> Any:
        return await self._route(request.transactional_id, request)

    async def AddOffsetsToTxn(self, request: tpb.AddOffsetsToTxnRequest, context: Any) -> Any:
        return await self._route(request.transactional_id, request)

    async def EndTxn(self, request: tpb.EndTxnRequest, context: Any) -> Any:
        return await self._route(request.transactional_id, request)

    async def DescribeTransactions(
        self, request: tpb.DescribeTransactionsRequest, context: Any
    ) -> tpb.DescribeTransactionsResponse:
        resp = tpb.DescribeTransactionsResponse()
        for tid in request.transactional_ids:
            rt = self._runtime(tid) if tid else None
            if rt is None:
                resp.transactions.append(
                    tpb.DescribedTransaction(
                        transactional_id=tid,
                        error_code=ErrorCode.NOT_COORDINATOR if tid else ErrorCode.INVALID_REQUEST,
                    )
                )
                continue
            one = tpb.DescribeTransactionsRequest(transactional_ids=[tid])
            resp.transactions.extend(await rt.submit(one))
        return resp

    async def ListTransactions(
        self, request: tpb.ListTransactionsRequest, context: Any
    ) -> tpb.ListTransactionsResponse:
        o = self._ownership()
        resp = tpb.ListTransactionsResponse()
        for rt in list(o.runtimes.values()) if o is not None else []:
            try:
                part = await rt.submit(request)
            except PartitionLostError:
                continue
            resp.transactions.extend(part.transactions)
        return resp


def register(servicer: TransactionCoordinatorServicer) -> Callable[[grpc.aio.Server], str]:
    """A ``start_server`` register callable for this servicer."""

    def add(server: grpc.aio.Server) -> str:
        transaction_pb2_grpc.add_TransactionCoordinatorServicer_to_server(servicer, server)
        return str(tpb.DESCRIPTOR.services_by_name["TransactionCoordinator"].full_name)

    return add
