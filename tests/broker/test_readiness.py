"""A broker is ready only once it has the cluster's metadata: before the controller's first
UpdateMetadata its health is NOT_SERVING and Metadata answers BROKER_NOT_AVAILABLE (a client
asks another broker), never "no topics". Kubernetes' readiness probe and the Service's
endpoints follow health, so a pod restarted by a rolling update takes no client before it
knows the topics (tests/k8s_node/test_day_two.py saw ``topic 'roll' does not exist`` from a
broker that had just started). The gRPC health name ``liveness`` (the chart's startup and
liveness probes) is SERVING throughout, so a broker waiting for a controller is not restarted,
and the metrics port's ``/ready`` (the readiness probe with TLS) follows the overall status."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater import errors
from headwater.v1 import metadata_pb2
from headwater.v1.errors_pb2 import ErrorCode
from tests.broker.broker_helpers import ActingController, BrokerProc
from tests.helpers.wait import wait_for


def _health(controller: ActingController, service: str = "headwater.v1.Broker") -> int:
    stub = health_pb2_grpc.HealthStub(controller.channel)
    answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    return int(answer.status)


def _ready_http(broker: BrokerProc) -> int:
    """The HTTP status of the metrics port's /ready."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{broker.metrics_port}/ready", timeout=10
        ) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_not_serving_until_the_first_update_metadata(etcd: str, tmp_path: Path) -> None:
    broker = BrokerProc(3, tmp_path / "data", etcd, tmp_path / "broker.log")
    broker.start()
    controller = ActingController(broker)
    try:
        assert _health(controller) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert _health(controller, "") == health_pb2.HealthCheckResponse.NOT_SERVING
        assert _health(controller, "liveness") == health_pb2.HealthCheckResponse.SERVING
        assert _ready_http(broker) == 503
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
        assert _health(controller, "") == health_pb2.HealthCheckResponse.SERVING
        assert _health(controller, "liveness") == health_pb2.HealthCheckResponse.SERVING
        assert _ready_http(broker) == 200
        resp = controller.stub.Metadata(metadata_pb2.MetadataRequest(), timeout=10)
        assert [t.name for t in resp.topics] == ["ready"]
        assert resp.topics[0].error_code == ErrorCode.NONE
        assert resp.cluster_id == "test-cluster"
    finally:
        controller.close()
        assert broker.stop() == 0
