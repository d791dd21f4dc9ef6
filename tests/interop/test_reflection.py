"""grpcurl-style use of a running cluster: server reflection and grpc.health.v1.

The reflection test builds the Broker API from what the server describes about itself —
no generated stubs, no .proto files — and calls Metadata with dynamic message classes.
"""

from __future__ import annotations

import functools
from typing import Any

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from interop_util import controller_address, wait_for


def test_reflection_lists_and_describes_the_broker(
    cluster: Any, broker_channel: grpc.Channel
) -> None:
    db = ProtoReflectionDescriptorDatabase(broker_channel)
    services = set(db.get_services())
    assert {"headwater.v1.Broker", "headwater.v1.GroupStreamService", "grpc.health.v1.Health"} <= (
        services
    )

    pool = descriptor_pool.DescriptorPool(db)
    broker = pool.FindServiceByName("headwater.v1.Broker")
    methods = {m.name: m for m in broker.methods}
    assert {"Produce", "ProduceRecords", "Fetch", "FetchRecords", "ListOffsets", "Metadata"} <= set(
        methods
    )
    assert methods["Fetch"].server_streaming and not methods["Fetch"].client_streaming

    metadata = methods["Metadata"]
    request_cls = message_factory.GetMessageClass(metadata.input_type)
    response_cls = message_factory.GetMessageClass(metadata.output_type)
    call = broker_channel.unary_unary(
        f"/{broker.full_name}/{metadata.name}",
        request_serializer=request_cls.SerializeToString,
        response_deserializer=response_cls.FromString,
    )
    response = call(request_cls(), timeout=10)
    as_json = json_format.MessageToDict(response, preserving_proto_field_name=True)
    host, port = cluster.bootstrap.rsplit(":", 1)
    assert {"host": host, "port": int(port)} in [
        {"host": b["host"], "port": b["port"]} for b in as_json["brokers"]
    ]
    assert as_json["cluster_id"]

    # an enum and a nested message type resolved through reflection alone
    produce_result = pool.FindMessageTypeByName("headwater.v1.PartitionProduceResult")
    assert (
        produce_result.fields_by_name["error_code"].enum_type.full_name == "headwater.v1.ErrorCode"
    )


def _health(channel: grpc.Channel, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return int(response.status)


def test_health_reports_serving_on_broker_and_controller(
    cluster: Any, broker_channel: grpc.Channel
) -> None:
    def serving(channel: grpc.Channel, service: str) -> bool:
        return _health(channel, service) == health_pb2.HealthCheckResponse.SERVING

    for service in ("", "headwater.v1.Broker", "headwater.v1.GroupStreamService"):
        assert wait_for(
            f"broker health {service!r}", functools.partial(serving, broker_channel, service)
        )
    with grpc.insecure_channel(controller_address(broker_channel)) as ctl:
        for service in ("", "headwater.v1.Controller"):
            assert wait_for(
                f"controller health {service!r}", functools.partial(serving, ctl, service)
            )
        # an unknown service name is NOT_FOUND, as the health protocol says
        try:
            _health(ctl, "headwater.v1.NoSuchService")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND
        else:
            raise AssertionError("health check of an unknown service did not fail")
