"""Broker.InitProducerId: a producer id for an idempotent (non-transactional) producer.

A request with a ``transactional_id`` is refused in-band with ``NOT_COORDINATOR``: transactional
producers get their id and epoch from the transaction coordinator that owns the id
(docs/transactions.md). Otherwise the answer is a fresh id from the etcd block allocator
(:class:`headwater.platform.producer_ids.ProducerIdAllocator`, ids never reused across the
cluster) at epoch 0; the request's ``producer_id`` / ``producer_epoch`` (KIP-360
re-initialisation) do not matter here, since a non-transactional producer always starts over
with a new id.

The allocator exists once the broker's etcd connection is up (:class:`ProducerIds` is handed to
the servicer before the server starts and filled in by the server after connecting); until
then, or when etcd cannot be reached, the answer is ``COORDINATOR_NOT_AVAILABLE`` (retriable).
"""

from __future__ import annotations

import logging

from headwater.errors import CoordinatorNotAvailableError, NotCoordinatorError, message_of
from headwater.platform import etcd as hetcd
from headwater.platform.producer_ids import ProducerIdAllocator
from headwater.v1 import transaction_pb2
from services.broker.codes import error_code

log = logging.getLogger(__name__)


class ProducerIds:
    """The broker's producer-id source: empty until the server attaches the allocator."""

    def __init__(self) -> None:
        self.allocator: ProducerIdAllocator | None = None

    async def next_id(self) -> int:
        if self.allocator is None:
            raise CoordinatorNotAvailableError("the broker is not connected to etcd yet")
        try:
            return await self.allocator.next_id()
        except hetcd.EtcdError as exc:
            raise CoordinatorNotAvailableError(f"allocating a producer id: {exc}") from exc


async def handle(
    ids: ProducerIds, req: transaction_pb2.InitProducerIdRequest
) -> transaction_pb2.InitProducerIdResponse:
    try:
        if req.transactional_id:
            raise NotCoordinatorError(
                f"transactional id {req.transactional_id!r}: ask its transaction coordinator "
                "(FindCoordinator key_type=TRANSACTION)"
            )
        pid = await ids.next_id()
    except Exception as exc:
        if not isinstance(exc, (NotCoordinatorError, CoordinatorNotAvailableError)):
            log.exception("InitProducerId failed")
        return transaction_pb2.InitProducerIdResponse(
            error_code=error_code(exc),
            error_message=message_of(exc),
            producer_id=-1,
            producer_epoch=-1,
        )
    return transaction_pb2.InitProducerIdResponse(producer_id=pid, producer_epoch=0)
