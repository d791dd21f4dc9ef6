"""ReplicaFetchResponse written and parsed by hand: each record byte is copied once on the
leader (into the message) and not at all on the follower.

Leader: the handler (:mod:`services.broker.handlers.replica_fetch`) answers with
:class:`ReplicaFetchView` / :class:`PartitionDataView` objects around the bytes its log read
returned, and ``Broker.ReplicaFetch`` is registered with :func:`encode_replica_fetch_response`
as its response serialiser (``services.broker.servicer.registrar``): one ``b"".join``. The
generated message copied the records in, again on every read of ``records`` (a upb message
builds a new ``bytes`` each time; the handler reads it once) and a third time to serialise,
for each follower.

Follower: the ``ReplicaFetch`` stream is opened with :func:`decode_replica_fetch_response` as
its response deserialiser (:func:`open_stream`): one pass over the message, each ``records`` a
``memoryview`` slice of what gRPC received (the log appends from views, as the leader does
with a produce request). The generated ``FromString`` copied the records out and every read
copied them again; the fetcher read them up to twice per partition per round.

Why it matters (profiled, docs/benchmarks.md): at RF=3 acks=all a follower's round is its
transfer and its append in lockstep, and the produce acknowledgement waits for the next
round; every copy of the round's bytes on the leader's or the follower's event loop lengthens
that round trip. The view objects have the attribute names of the generated classes;
hypothesis tests check both directions against protobuf's own serialisation.

Wire layout (broker.proto)::

    ReplicaFetchResponse:      1 error_code varint | 2 partitions LEN (repeated)
                               | 3 incremental varint
    ReplicaFetchPartitionData: 1 topic LEN | 2 partition varint | 3 error_code varint
                               | 4 error_message LEN | 5 high_watermark varint
                               | 6 log_start_offset varint | 7 records LEN

Unknown fields are skipped, as protobuf does; a truncated or malformed message raises
:class:`ValueError` (gRPC reports a failing deserialiser as an INTERNAL error on the call,
which the fetcher treats as a broken stream and reopens).
"""

from __future__ import annotations

import grpc

from headwater.protowire import encode_varint, fields, int32, int64
from headwater.v1 import broker_pb2

_METHOD = "/headwater.v1.Broker/ReplicaFetch"


class PartitionDataView:
    """One ``ReplicaFetchPartitionData`` entry (proto3 defaults when absent)."""

    __slots__ = (
        "error_code",
        "error_message",
        "high_watermark",
        "log_start_offset",
        "partition",
        "records",
        "topic",
    )

    def __init__(
        self,
        topic: str = "",
        partition: int = 0,
        *,
        error_code: int = 0,
        error_message: str = "",
        high_watermark: int = 0,
        log_start_offset: int = 0,
        records: bytes | memoryview = b"",
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.error_code = error_code
        self.error_message = error_message
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset
        self.records: bytes | memoryview = records


class ReplicaFetchView:
    """The fields of one ReplicaFetchResponse (proto3 defaults when absent)."""

    __slots__ = ("error_code", "incremental", "partitions")

    def __init__(
        self,
        partitions: list[PartitionDataView] | None = None,
        *,
        error_code: int = 0,
        incremental: bool = False,
    ) -> None:
        self.error_code = error_code
        self.incremental = incremental
        self.partitions: list[PartitionDataView] = partitions if partitions is not None else []


def _partition(view: memoryview, pos: int, end: int) -> PartitionDataView:
    out = PartitionDataView()
    for number, wire_type, a, b in fields(view, pos, end, "ReplicaFetchPartitionData"):
        if wire_type == 0:
            if number == 2:
                out.partition = int32(a)
            elif number == 3:
                out.error_code = int32(a)
            elif number == 5:
                out.high_watermark = int64(a)
            elif number == 6:
                out.log_start_offset = int64(a)
        elif number == 7:
            out.records = view[a:b]
        elif number == 1:
            out.topic = str(view[a:b], "utf-8")
        elif number == 4:
            out.error_message = str(view[a:b], "utf-8")
    return out


def decode_replica_fetch_response(data: bytes) -> ReplicaFetchView:
    """Parse ReplicaFetchResponse wire bytes; each ``records`` is a view into ``data``."""
    out = ReplicaFetchView()
    view = memoryview(data)
    for number, wire_type, a, b in fields(view, 0, len(data), "ReplicaFetchResponse"):
        if wire_type == 0:
            if number == 1:
                out.error_code = int32(a)
            elif number == 3:
                out.incremental = a != 0
        elif number == 2:
            out.partitions.append(_partition(view, a, b))
    return out


def _field(key: bytes, value: bytes | memoryview) -> list[bytes | memoryview]:
    return [key, encode_varint(len(value)), value]


def _encode_partition(d: PartitionDataView) -> list[bytes | memoryview]:
    """Field keys are ``number << 3 | wire_type``, one byte each here (see the layout above)."""
    pieces: list[bytes | memoryview] = []
    if d.topic:
        pieces += _field(b"\x0a", d.topic.encode())
    for key, value in ((b"\x10", d.partition), (b"\x18", d.error_code)):
        if value:
            pieces += (key, encode_varint(value))
    if d.error_message:
        pieces += _field(b"\x22", d.error_message.encode())
    for key, value in ((b"\x28", d.high_watermark), (b"\x30", d.log_start_offset)):
        if value:
            pieces += (key, encode_varint(value))
    if len(d.records):
        pieces += _field(b"\x3a", d.records)
    return pieces


def encode_replica_fetch_response(resp: ReplicaFetchView) -> bytes:
    """The protobuf wire bytes of ``resp`` (proto3: fields at their default are left out);
    the records are copied once, by the final join."""
    pieces: list[bytes | memoryview] = []
    if resp.error_code:
        pieces += (b"\x08", encode_varint(resp.error_code))
    for d in resp.partitions:
        body = _encode_partition(d)
        pieces += (b"\x12", encode_varint(sum(map(len, body))), *body)
    if resp.incremental:
        pieces.append(b"\x18\x01")
    return b"".join(pieces)


def open_stream(channel: grpc.aio.Channel) -> grpc.aio.StreamStreamCall:
    """A new ``Broker.ReplicaFetch`` stream on ``channel`` whose responses are
    :class:`ReplicaFetchView` objects (requests are the generated messages)."""
    method = channel.stream_stream(
        _METHOD,
        request_serializer=broker_pb2.ReplicaFetchRequest.SerializeToString,
        response_deserializer=decode_replica_fetch_response,
    )
    return method()
