"""The ``headwater.v1.Controller`` gRPC servicer.

Mutations run as commands on the controller's event loop: topic commands
(:mod:`services.controller.topics`), AlterPartition / ControlledShutdown / ElectLeaders
(:mod:`services.controller.operations`) and reassignments
(:mod:`services.controller.reassignment`). A standby answers admin mutations with a
NOT_CONTROLLER status naming the active controller when known; the broker-originated control
RPCs (AlterPartition, ControlledShutdown) carry NOT_CONTROLLER in-band (``error_code``), like
every control-RPC rejection. DescribeCluster and DescribeConfigs read etcd directly, so any
controller answers them; AlterConfigs (:mod:`services.controller.configs`) runs on the loop.
CreateTopics, DeleteTopics and CreatePartitions are subject to the caller's controller
mutation rate (:mod:`services.controller.mutation_quota`).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from headwater import errors
from headwater.platform import cluster_layout
from headwater.platform import etcd as hetcd
from headwater.platform.principal import client_id_of, principal_of
from headwater.v1 import controller_pb2, controller_pb2_grpc, security_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.controller import configs, operations, reassignment, security, topics
from services.controller import state as st
from services.controller.election import LeaderInfo
from services.controller.events import ControllerLoop
from services.controller.mutation_quota import Gate, MutationQuotas
from services.controller.requests import broker_info


class ControllerService(controller_pb2_grpc.ControllerServicer):
    def __init__(self, loop: ControllerLoop, leader: Callable[[], LeaderInfo | None]) -> None:
        self._loop = loop
        self._leader = leader  # the active controller as last seen by the election
        self._quotas: MutationQuotas | None = None

    async def _gate(self, context: grpc.aio.ServicerContext) -> Gate:
        """The caller's controller mutation quota (:mod:`services.controller.mutation_quota`)."""
        if self._quotas is None:
            self._quotas = MutationQuotas(self._loop.etcd)
        return await self._quotas.gate(principal_of(context), client_id_of(context))

    def _require_active(self) -> None:
        if self._loop.active:
            return
        leader = self._leader()
        where = (
            f"; the active controller is {leader.controller_id} at {leader.host}:{leader.port}"
            if leader is not None and leader.controller_id != self._loop.controller_id
            else "; no controller is active yet"
        )
        raise errors.NotControllerError(
            f"controller {self._loop.controller_id} is not the active controller{where}"
        )

    async def CreateTopics(
        self, request: controller_pb2.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.CreateTopicsResponse:
        self._require_active()
        gate = await self._gate(context)
        return await self._loop.submit(lambda loop: topics.create_topics(loop, request, gate))

    async def DeleteTopics(
        self, request: controller_pb2.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.DeleteTopicsResponse:
        self._require_active()
        gate = await self._gate(context)
        return await self._loop.submit(lambda loop: topics.delete_topics(loop, request, gate))

    async def CreatePartitions(
        self, request: controller_pb2.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.CreatePartitionsResponse:
        self._require_active()
        gate = await self._gate(context)
        return await self._loop.submit(lambda loop: topics.create_partitions(loop, request, gate))

    async def AlterTopicConfigs(
        self, request: controller_pb2.AlterTopicConfigsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.AlterTopicConfigsResponse:
        self._require_active()
        return await self._loop.submit(lambda loop: topics.alter_topic_configs(loop, request))

    async def AlterPartition(
        self, request: controller_pb2.AlterPartitionRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.AlterPartitionResponse:
        try:
            self._require_active()
            return await self._loop.submit(lambda loop: operations.alter_partition(loop, request))
        except errors.NotControllerError:
            return controller_pb2.AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER)

    async def ControlledShutdown(
        self, request: controller_pb2.ControlledShutdownRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.ControlledShutdownResponse:
        try:
            self._require_active()
            return await self._loop.submit(
                lambda loop: operations.controlled_shutdown(loop, request)
            )
        except errors.NotControllerError as exc:
            return controller_pb2.ControlledShutdownResponse(
                error_code=ErrorCode.NOT_CONTROLLER, error_message=exc.message
            )

    async def ElectLeaders(
        self, request: controller_pb2.ElectLeadersRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.ElectLeadersResponse:
        self._require_active()
        return await self._loop.submit(lambda loop: operations.elect_leaders(loop, request))

    async def AlterPartitionReassignments(
        self,
        request: controller_pb2.AlterPartitionReassignmentsRequest,
        context: grpc.aio.ServicerContext,
    ) -> controller_pb2.AlterPartitionReassignmentsResponse:
        self._require_active()
        return await self._loop.submit(
            lambda loop: reassignment.alter_partition_reassignments(loop, request)
        )

    async def ListPartitionReassignments(
        self,
        request: controller_pb2.ListPartitionReassignmentsRequest,
        context: grpc.aio.ServicerContext,
    ) -> controller_pb2.ListPartitionReassignmentsResponse:
        self._require_active()
        return await self._loop.submit(
            lambda loop: reassignment.list_partition_reassignments(loop, request)
        )

    async def DescribeConfigs(
        self, request: controller_pb2.DescribeConfigsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.DescribeConfigsResponse:
        return await configs.describe_configs(self._loop.etcd, request)

    async def AlterConfigs(
        self, request: controller_pb2.AlterConfigsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.AlterConfigsResponse:
        self._require_active()
        try:
            return await self._loop.submit(lambda loop: configs.alter_configs(loop, request))
        finally:
            if self._quotas is not None:
                self._quotas.invalidate()  # a quota entity may have changed

    async def DescribeCluster(
        self, request: controller_pb2.DescribeClusterRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.DescribeClusterResponse:
        etcd = self._loop.etcd
        try:
            cid = await etcd.get(cluster_layout.CLUSTER_ID_KEY)
            leader = await etcd.get(cluster_layout.LEADER_KEY)
            snap = await etcd.get_prefix(cluster_layout.BROKERS_PREFIX)
        except hetcd.EtcdError as exc:
            raise errors.RequestTimedOutError(f"etcd: {exc}") from exc
        info = LeaderInfo.decode(leader[0]) if leader else None
        brokers = []
        for kv in snap.items:
            b = broker_info(st.Broker.decode(kv.value, kv.meta.create_revision))
            b.ClearField("broker_epoch")  # a control-RPC fencing value: not for clients
            brokers.append(b)
        return controller_pb2.DescribeClusterResponse(
            cluster_id=cid[0].decode() if cid else "",
            controller_id=info.controller_id if info else -1,
            controller_epoch=info.epoch if info else -1,
            brokers=brokers,
        )

    # --- security (services/controller/security.py)

    async def AlterUserScramCredentials(
        self,
        request: security_pb2.AlterUserScramCredentialsRequest,
        context: grpc.aio.ServicerContext,
    ) -> security_pb2.AlterUserScramCredentialsResponse:
        self._require_active()
        return await self._loop.submit(
            lambda loop: security.alter_user_scram_credentials(loop, request)
        )

    async def DescribeUserScramCredentials(
        self,
        request: security_pb2.DescribeUserScramCredentialsRequest,
        context: grpc.aio.ServicerContext,
    ) -> security_pb2.DescribeUserScramCredentialsResponse:
        return await security.describe_user_scram_credentials(self._loop.etcd, request)

    async def CreateAcls(
        self, request: security_pb2.CreateAclsRequest, context: grpc.aio.ServicerContext
    ) -> security_pb2.CreateAclsResponse:
        self._require_active()
        return await self._loop.submit(lambda loop: security.create_acls(loop, request))

    async def DeleteAcls(
        self, request: security_pb2.DeleteAclsRequest, context: grpc.aio.ServicerContext
    ) -> security_pb2.DeleteAclsResponse:
        self._require_active()
        return await self._loop.submit(lambda loop: security.delete_acls(loop, request))

    async def DescribeAcls(
        self, request: security_pb2.DescribeAclsRequest, context: grpc.aio.ServicerContext
    ) -> security_pb2.DescribeAclsResponse:
        return await security.describe_acls(self._loop.etcd, request)


def register(servicer: ControllerService) -> Callable[[grpc.aio.Server], str]:
    """A ``start_server`` register callable for this servicer."""

    def add(server: grpc.aio.Server) -> str:
        controller_pb2_grpc.add_ControllerServicer_to_server(servicer, server)
        return str(controller_pb2.DESCRIPTOR.services_by_name["Controller"].full_name)

    return add
