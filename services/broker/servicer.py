"""The ``headwater.v1.Broker`` gRPC servicer: routes each RPC to its handler module."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc

from headwater.v1 import broker_pb2, broker_pb2_grpc, metadata_pb2, transaction_pb2
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
    replica_fetch,
    txn_markers,
)
from services.broker.replica_manager import ReplicaManager

SERVICE_NAME = "headwater.v1.Broker"


class BrokerServicer(broker_pb2_grpc.BrokerServicer):
    def __init__(self, rm: ReplicaManager, producer_ids: init_producer_id.ProducerIds) -> None:
        self._rm = rm
        self._producer_ids = producer_ids
        self._round_robin = produce_records.RoundRobin()

    async def Produce(
        self, request: broker_pb2.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ProduceResponse:
        return await produce.handle(self._rm, request)

    async def ProduceRecords(
        self, request: broker_pb2.ProduceRecordsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ProduceResponse:
        return await produce_records.handle(self._rm, self._round_robin, request)

    async def Fetch(
        self, request: broker_pb2.FetchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[broker_pb2.FetchResponse]:
        async for resp in fetch.handle(self._rm, request):
            yield resp

    async def FetchRecords(
        self, request: broker_pb2.FetchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[broker_pb2.FetchRecordsResponse]:
        async for resp in fetch_records.handle(self._rm, request):
            yield resp

    async def ListOffsets(
        self, request: broker_pb2.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListOffsetsResponse:
        return await list_offsets.handle(self._rm, request)

    async def Metadata(
        self, request: metadata_pb2.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> metadata_pb2.MetadataResponse:
        return await metadata.handle(self._rm.metadata, request)

    async def ReplicaFetch(
        self,
        request_iterator: AsyncIterator[broker_pb2.ReplicaFetchRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[broker_pb2.ReplicaFetchResponse]:
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

    async def InitProducerId(
        self, request: transaction_pb2.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> transaction_pb2.InitProducerIdResponse:
        return await init_producer_id.handle(self._producer_ids, request)

    async def WriteTxnMarkers(
        self, request: broker_pb2.WriteTxnMarkersRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.WriteTxnMarkersResponse:
        return await txn_markers.handle(self._rm, request)


def registrar(
    rm: ReplicaManager, producer_ids: init_producer_id.ProducerIds
) -> Callable[[grpc.aio.Server], str]:
    """A ``start_server`` register callable adding the servicer; returns the service name."""

    def register(server: grpc.aio.Server) -> str:
        broker_pb2_grpc.add_BrokerServicer_to_server(BrokerServicer(rm, producer_ids), server)
        return SERVICE_NAME

    return register
