"""A broker is ready only once it has the cluster's metadata: before the controller's first
UpdateMetadata its health is NOT_SERVING and Metadata answers BROKER_NOT_AVAILABLE (a client
asks another broker), never "no topics". Kubernetes' readiness probe and the Service's
endpoints follow health, so a pod restarted by a rolling update takes no client before it
knows the topics (tests/k8s_node/test_day_two.py saw ``topic 'roll' does not exist`` from a
broker that had just started)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater import errors
from headwater.v1 import metadata_pb2
from headwater.v1.errors_pb2 import ErrorCode
from tests.broker.broker_helpers import ActingController, BrokerProc
from tests.helpers.wait import wait_for


def _health(controller: ActingController) -> int:
    stub = health_pb2_grpc.HealthStub(controller.channel)
    answer = stub.Check(health_pb2.HealthCheckRequest(service="headwater.v1.Broker"), timeout=10)
    return int(answer.status)


def test_not_serving_until_the_first_update_metadata(etcd: str, tmp_path: Path) -> None:
    broker = BrokerProc(3, tmp_path / "data", etcd, tmp_path / "broker.log")
    broker.start()
    controller = ActingController(broker)
    try:
        assert _health(controller) == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.RpcError) as info:
            controller.stub.Metadata(metadata_pb2.MetadataRequest(), timeout=10)
        exc = errors.from_rpc_error(info.value)
        assert isinstance(exc, errors.BrokerNotAvailableError), exc
        assert exc.retriable
        assert "metadata" in str(exc)

        controller.create_topic("ready")  # LeaderAndIsr, then the UpdateMetadata
        wait_for(
            lambda: _health(controller) == health_pb2.HealthCheckResponse.SERVING,
            timeout=10,
            what="health SERVING after the first UpdateMetadata",
        )
        resp = controller.stub.Metadata(metadata_pb2.MetadataRequest(), timeout=10)
        assert [t.name for t in resp.topics] == ["ready"]
        assert resp.topics[0].error_code == ErrorCode.NONE
        assert resp.cluster_id == "test-cluster"
    finally:
        controller.close()
        assert broker.stop() == 0
