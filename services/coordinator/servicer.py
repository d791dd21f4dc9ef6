"""The GroupCoordinator gRPC servicer: routes each group's request to its partition runtime.

A group lives in offsets-topic partition ``partition_for(group, P)``. FindCoordinator may be
asked of any coordinator: it reads the partition's owner from etcd (owners + live ids) and
answers COORDINATOR_NOT_AVAILABLE while there is none; with ``key_type = TRANSACTION`` it
answers the owner of ``__transaction_state`` partition ``partition_for(transactional_id,
txn_partitions)`` (txn owners prefix). TxnOffsetCommit / WriteTxnOffsetMarker are routed like
OffsetCommit (txn_offsets.py); both answer UNKNOWN_TOPIC_OR_PARTITION for partitions that do
not exist, writing nothing for them (known_partitions.py). Every other RPC goes to the owned
:class:`PartitionRuntime` (which answers after its records are durable and replayed), or is
answered NOT_COORDINATOR in-band when this process does not own the partition. ListGroups
covers only the groups of partitions owned here (clients merge over coordinators).

DescribeGroups measures lag at request time: the runtime names the group's partitions, the
servicer asks the partitions' leaders for log start and end (ListOffsets earliest/latest),
then the runtime describes the group with those ends. Stateless apart from what it reads:
runtimes are owned by :class:`Ownership` (same loop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc

from headwater import errors
from headwater.client import AsyncAdminClient, TopicPartition
from headwater.platform import etcd as hetcd
from headwater.v1 import coordinator_pb2 as pb
from headwater.v1 import coordinator_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from headwater.v1.metadata_pb2 import BrokerInfo
from services.coordinator import known_partitions as kp
from services.coordinator import ownership as own
from services.coordinator.group_handlers import (
    DeleteGroup,
    DescribeGroup,
    GroupPartitions,
    not_coordinator,
)
from services.coordinator.handlers import PartitionLostError
from services.coordinator.membership import valid_group_id

log = logging.getLogger(__name__)


async def measure_ends(
    admin: AsyncAdminClient, tps: list[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (log start, high watermark); partitions that fail are left out."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for topic, p in tps:
        tp = TopicPartition(topic, p)
        try:
            start = await admin.list_offsets({tp: "earliest"})
            end = await admin.list_offsets({tp: "latest"})
        except (TimeoutError, errors.HeadwaterError) as exc:
            log.debug("lag of %s[%d] not measured: %s", topic, p, exc)
            continue
        out[(topic, p)] = (start[tp].offset, end[tp].offset)
    return out


class GroupCoordinatorServicer(coordinator_pb2_grpc.GroupCoordinatorServicer):
    """See the module docstring."""

    def __init__(
        self,
        etcd: hetcd.Etcd,
        ownership: Callable[[], own.Ownership | None],
        admin: AsyncAdminClient,
        partitions: int,
        txn_partitions: int = 0,
    ) -> None:
        self._etcd = etcd
        self.txn_partitions = txn_partitions
        self._ownership = ownership
        self._admin = admin
        self.partitions = partitions
        self._known = kp.KnownPartitions(admin)

    def _runtime(self, group_id: str) -> Any:
        o = self._ownership()
        if o is None:
            return None
        return o.runtimes.get(own.partition_for(group_id, self.partitions))

    async def _route(self, group_id: str, request: object) -> Any:
        rt = self._runtime(group_id)
        if rt is None:
            return not_coordinator(request)
        return await rt.submit(request)

    # ------------------------------------------------------------ RPCs

    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: grpc.aio.ServicerContext
    ) -> pb.FindCoordinatorResponse:
        txn = request.key_type == pb.TRANSACTION
        if not valid_group_id(request.group_id):
            return pb.FindCoordinatorResponse(
                error_code=ErrorCode.INVALID_REQUEST if txn else ErrorCode.INVALID_GROUP_ID,
                error_message="invalid transactional id" if txn else "invalid group id",
            )
        if txn and self.txn_partitions < 1:
            return pb.FindCoordinatorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message="this coordinator runs no transaction coordinator",
            )
        n, prefix = (
            (self.txn_partitions, own.TXN_OWNERS_PREFIX)
            if txn
            else (self.partitions, own.OWNERS_PREFIX)
        )
        p = own.partition_for(request.group_id, n)
        try:
            reg = await own.owner_of(self._etcd, p, prefix)
        except hetcd.EtcdError as exc:
            reg, why = None, str(exc)
        else:
            why = f"{'transaction-state' if txn else 'offsets'} partition {p} has no live owner"
        if reg is None:
            return pb.FindCoordinatorResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message=why,
                offsets_partition=p,
            )
        return pb.FindCoordinatorResponse(
            coordinator=BrokerInfo(
                broker_id=int(reg["coordinator_id"]),  # type: ignore[call-overload]
                host=str(reg["host"]),
                port=int(reg["port"]),  # type: ignore[call-overload]
                metrics_url=str(reg.get("metrics_url", "")),
            ),
            offsets_partition=p,
        )

    async def JoinGroup(self, request: pb.JoinGroupRequest, context: Any) -> Any:
        return await self._route(request.group_id, request)

    async def SyncGroup(self, request: pb.SyncGroupRequest, context: Any) -> Any:
        return await self._route(request.group_id, request)

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> Any:
        return await self._route(request.group_id, request)

    async def LeaveGroup(self, request: pb.LeaveGroupRequest, context: Any) -> Any:
        return await self._route(request.group_id, request)

    async def _commit(self, request: pb.OffsetCommitRequest | pb.TxnOffsetCommitRequest) -> Any:
        """OffsetCommit / TxnOffsetCommit: partitions that do not exist are answered
        UNKNOWN_TOPIC_OR_PARTITION and not written (:mod:`known_partitions`)."""
        if self._runtime(request.group_id) is None:
            return not_coordinator(request)
        # Malformed partitions (no topic, negative number) are the runtime's INVALID_REQUEST.
        unknown = await self._known.unknown(
            (p.topic, p.partition) for p in request.partitions if p.topic and p.partition >= 0
        )
        if not unknown:
            return await self._route(request.group_id, request)
        known = kp.split(request, unknown)
        resp = (
            await self._route(request.group_id, known)
            if known.partitions
            else pb.OffsetCommitResponse()
        )
        return kp.merge(request, resp, unknown)

    async def OffsetCommit(self, request: pb.OffsetCommitRequest, context: Any) -> Any:
        return await self._commit(request)

    async def OffsetFetch(self, request: pb.OffsetFetchRequest, context: Any) -> Any:
        return await self._route(request.group_id, request)

    async def TxnOffsetCommit(self, request: pb.TxnOffsetCommitRequest, context: Any) -> Any:
        return await self._commit(request)

    async def WriteTxnOffsetMarker(
        self, request: pb.WriteTxnOffsetMarkerRequest, context: Any
    ) -> Any:
        return await self._route(request.group_id, request)

    async def DescribeGroups(
        self, request: pb.DescribeGroupsRequest, context: Any
    ) -> pb.DescribeGroupsResponse:
        resp = pb.DescribeGroupsResponse()
        for gid in request.group_ids:
            rt = self._runtime(gid)
            if rt is None:
                resp.groups.append(not_coordinator(DescribeGroup(gid)))
                continue
            try:
                tps = await rt.submit(GroupPartitions(gid))
            except PartitionLostError:
                resp.groups.append(not_coordinator(DescribeGroup(gid)))
                continue
            ends = await measure_ends(self._admin, tps)
            resp.groups.append(await rt.submit(DescribeGroup(gid, ends)))
        return resp

    async def ListGroups(self, request: pb.ListGroupsRequest, context: Any) -> Any:
        o = self._ownership()
        resp = pb.ListGroupsResponse()
        for rt in list(o.runtimes.values()) if o is not None else []:
            part = await rt.submit(request)
            resp.groups.extend(part.groups)
        return resp

    async def DeleteGroups(
        self, request: pb.DeleteGroupsRequest, context: Any
    ) -> pb.DeleteGroupsResponse:
        resp = pb.DeleteGroupsResponse()
        for gid in request.group_ids:
            resp.results.append(await self._route(gid, DeleteGroup(gid)))
        return resp


def register(servicer: GroupCoordinatorServicer) -> Callable[[grpc.aio.Server], str]:
    """A ``start_server`` register callable for this servicer."""

    def add(server: grpc.aio.Server) -> str:
        coordinator_pb2_grpc.add_GroupCoordinatorServicer_to_server(servicer, server)
        return str(pb.DESCRIPTOR.services_by_name["GroupCoordinator"].full_name)

    return add
