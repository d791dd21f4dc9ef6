"""The ``headwater.v1.Broker`` gRPC servicer: routes each RPC to its handler module.

Client RPCs (Produce, ProduceRecords, Fetch, FetchRecords, ListOffsets, Metadata,
InitProducerId) go through quota enforcement (``services.broker.quotas.enforce``): held while
the client is throttled, timed for the request quota, byte-rate quotas for produce and fetch.
Broker-to-broker and controller RPCs are exempt.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc

from headwater.v1 import broker_pb2, broker_pb2_grpc, metadata_pb2, transaction_pb2
from services.broker.fetch_memory import FetchMemory
from services.broker.handlers import (
    control,
    fetch,
    fetch_records,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
    produce_records,
    produce_wire,
    replica_fetch,
    txn_markers,
)
from services.broker.quotas import enforce
from services.broker.quotas.manager import QuotaManager
from services.broker.replica_manager import ReplicaManager
from services.broker.replication import fetch_wire
from services.broker.request_order import RequestOrder

SERVICE_NAME = "headwater.v1.Broker"


class BrokerServicer(broker_pb2_grpc.BrokerServicer):
    def __init__(
        self,
        rm: ReplicaManager,
        producer_ids: init_producer_id.ProducerIds,
        quotas: QuotaManager | None = None,
        fetch_memory: FetchMemory | None = None,
    ) -> None:
        self._rm = rm
        #: bytes consumer fetch streams may hold (per connection and per broker)
        self._fetch_memory = fetch_memory if fetch_memory is not None else FetchMemory()
        self._producer_ids = producer_ids
        self._round_robin = produce_records.RoundRobin()
        self._quotas = quotas if quotas is not None else QuotaManager(rm.broker_id)
        #: the order of producers' numbered concurrent requests (ProduceRequest.order_*)
        self._request_order = RequestOrder()

    async def Produce(
        self,
        request: broker_pb2.ProduceRequest | produce_wire.ProduceRequestView,
        context: grpc.aio.ServicerContext,
    ) -> broker_pb2.ProduceResponse:
        size = sum(len(pr.records) for pr in request.partitions)
        who = enforce.identity(context, request.client_id)
        return await enforce.produce(
            self._quotas, who, produce.handle(self._rm, request, self._request_order), size
        )

    async def ProduceRecords(
        self, request: broker_pb2.ProduceRecordsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ProduceResponse:
        who = enforce.identity(context, request.client_id)
        coro = produce_records.handle(self._rm, self._round_robin, request)
        return await enforce.produce(self._quotas, who, coro, request.ByteSize())

    async def Fetch(
        self, request: broker_pb2.FetchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[broker_pb2.FetchResponse]:
        who = enforce.identity(context, request.client_id)
        responses = fetch.handle(self._rm, request, self._fetch_memory, context.peer() or "")
        async for resp in enforce.stream(
            self._quotas, who, responses, lambda r: len(r.records), _set_fetch_throttle
        ):
            yield resp

    async def FetchRecords(
        self, request: broker_pb2.FetchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[broker_pb2.FetchRecordsResponse]:
        who = enforce.identity(context, request.client_id)
        responses = fetch_records.handle(self._rm, request)
        async for resp in enforce.stream(self._quotas, who, responses, lambda r: r.ByteSize()):
            yield resp

    async def ListOffsets(
        self, request: broker_pb2.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListOffsetsResponse:
        who = enforce.identity(context)
        coro = list_offsets.handle(self._rm, request)
        return (await enforce.unary(self._quotas, who, coro))[0]

    async def Metadata(
        self, request: metadata_pb2.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> metadata_pb2.MetadataResponse:
        who = enforce.identity(context)
        coro = metadata.handle(self._rm.metadata, request)
        return (await enforce.unary(self._quotas, who, coro))[0]

    async def ReplicaFetch(
        self,
        request_iterator: AsyncIterator[broker_pb2.ReplicaFetchRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[fetch_wire.ReplicaFetchView]:
        async for resp in replica_fetch.handle(self._rm, request_iterator):
            yield resp

    async def OffsetForLeaderEpoch(
        self, request: broker_pb2.OffsetForLeaderEpochRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.OffsetForLeaderEpochResponse:
        return await offset_for_leader_epoch.handle(self._rm, request)

    async def LeaderAndIsr(
        self, request: broker_pb2.LeaderAndIsrRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.LeaderAndIsrResponse:
        return await control.leader_and_isr(self._rm, request)

    async def UpdateMetadata(
        self, request: broker_pb2.UpdateMetadataRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UpdateMetadataResponse:
        return await control.update_metadata(self._rm, request)

    async def StopReplica(
        self, request: broker_pb2.StopReplicaRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.StopReplicaResponse:
        return await control.stop_replica(self._rm, request)

    async def ControllerLiveness(
        self, request: broker_pb2.ControllerLivenessRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[broker_pb2.ControllerLivenessResponse]:
        async for response in control.controller_liveness(self._rm, request):
            yield response

    async def InitProducerId(
        self, request: transaction_pb2.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> transaction_pb2.InitProducerIdResponse:
        who = enforce.identity(context)
        coro = init_producer_id.handle(self._producer_ids, request)
        return (await enforce.unary(self._quotas, who, coro))[0]

    async def WriteTxnMarkers(
        self, request: broker_pb2.WriteTxnMarkersRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.WriteTxnMarkersResponse:
        return await txn_markers.handle(self._rm, request)


def _set_fetch_throttle(response: broker_pb2.FetchResponse, ms: int) -> None:
    response.throttle_time_ms = ms


def registrar(
    rm: ReplicaManager,
    producer_ids: init_producer_id.ProducerIds,
    quotas: QuotaManager | None = None,
) -> Callable[[grpc.aio.Server], str]:
    """A ``start_server`` register callable adding the servicer; returns the service name."""

    def register(server: grpc.aio.Server) -> str:
        servicer = BrokerServicer(rm, producer_ids, quotas)
        handlers = _method_handlers(servicer)
        # Produce's request is parsed by hand: records stay views of the received bytes
        handlers["Produce"] = grpc.unary_unary_rpc_method_handler(
            servicer.Produce,
            request_deserializer=produce_wire.decode_produce_request,
            response_serializer=broker_pb2.ProduceResponse.SerializeToString,
        )
        # ReplicaFetch's answers are written by hand: records copied once, into the message
        handlers["ReplicaFetch"] = grpc.stream_stream_rpc_method_handler(
            servicer.ReplicaFetch,
            request_deserializer=broker_pb2.ReplicaFetchRequest.FromString,
            response_serializer=fetch_wire.encode_replica_fetch_response,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),)
        )
        server.add_registered_method_handlers(SERVICE_NAME, handlers)
        return SERVICE_NAME

    return register


class _Capture:
    """Stands in for the server to take the generated method handlers of the servicer."""

    handlers: dict[str, grpc.RpcMethodHandler]

    def add_generic_rpc_handlers(self, generic_handlers: object) -> None:
        pass

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.handlers = handlers


def _method_handlers(servicer: BrokerServicer) -> dict[str, grpc.RpcMethodHandler]:
    """The generated ``{method: handler}`` table (generated (de)serialisers)."""
    capture = _Capture()
    broker_pb2_grpc.add_BrokerServicer_to_server(servicer, capture)
    return dict(capture.handlers)
