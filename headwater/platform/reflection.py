"""Server reflection as both ``grpc.reflection.v1`` and ``grpc.reflection.v1alpha``.

grpcio-reflection ships only v1alpha, while current tools (grpcurl, Postman, grpcui) ask v1 first
and some no longer fall back. The two protocols are the same messages under two package names
(grpc/reflection/v1/reflection.proto is v1alpha's file renamed), so the same servicer answers
both: v1 requests are decoded with v1alpha's message classes, which read the same bytes. The v1
file is registered in the default descriptor pool (a copy of v1alpha's with the package
renamed) so that reflection can describe itself under either name.

Method symbols: grpcurl resolves ``describe pkg.Service.Method`` and every call by asking for
the file containing ``pkg.Service.Method``; the upb descriptor pool of current protobuf does not
index method names (``FindFileContainingSymbol`` raises), so such a request is answered with the
file of the service when the service has that method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha_pb2

V1ALPHA_SERVICE = reflection.SERVICE_NAME  # "grpc.reflection.v1alpha.ServerReflection"
V1_SERVICE = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _register_v1_descriptor() -> None:
    """Add grpc/reflection/v1/reflection.proto to the default pool (once per process)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    v1alpha_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = _V1_FILE
    proto.package = "grpc.reflection.v1"
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(".grpc.reflection.v1alpha."):
                field.type_name = ".grpc.reflection.v1." + field.type_name.rsplit(".", 1)[1]
    for service in proto.service:
        for method in service.method:
            for attr in ("input_type", "output_type"):
                name = getattr(method, attr).rsplit(".", 1)[1]
                setattr(method, attr, f".grpc.reflection.v1.{name}")
    proto.options.Clear()
    pool.Add(proto)


class _Servicer(reflection.aio.ReflectionServicer):
    """grpcio-reflection's asyncio servicer, resolving method symbols too."""

    def _file_containing_symbol(self, request: Any, fully_qualified_name: str) -> Any:
        answer = super()._file_containing_symbol(request, fully_qualified_name)
        if not answer.HasField("error_response") or "." not in fully_qualified_name:
            return answer
        service_name, method = fully_qualified_name.rsplit(".", 1)
        try:
            service = self._pool.FindServiceByName(service_name)
        except KeyError:
            return answer
        if method not in service.methods_by_name:
            return answer
        return super()._file_containing_symbol(request, service_name)


def enable(service_names: Sequence[str], server: grpc.aio.Server) -> None:
    """Serve reflection v1 and v1alpha on ``server``, listing ``service_names`` and both
    reflection services."""
    _register_v1_descriptor()
    servicer = _Servicer([*service_names, V1_SERVICE, V1ALPHA_SERVICE])
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=v1alpha_pb2.ServerReflectionRequest.FromString,
        response_serializer=v1alpha_pb2.ServerReflectionResponse.SerializeToString,
    )
    for service in (V1_SERVICE, V1ALPHA_SERVICE):
        server.add_registered_method_handlers(service, {"ServerReflectionInfo": handler})
