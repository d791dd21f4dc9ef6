"""FetchResponse parsed by hand: the records stay a view of the bytes gRPC received.

``broker_pb2.FetchResponse.FromString`` copies the (up to several MiB) ``records`` field out of
the message, and every read of ``resp.records`` on a upb message builds a new ``bytes`` copy
again; the consumer read it three times per response. py-spy on ``headwater bench consume``
showed gRPC's receive path and these copies ahead of batch decoding. This module reads the
same protobuf wire bytes (``Broker.Fetch`` is called with it as the response deserialiser,
:meth:`headwater.client.connection.ConnectionPool.raw_fetch`) and hands ``records`` out as a
``memoryview`` slice of the received message: no copy at all. A hypothesis test checks that
it reads back every field of what protobuf's own serialiser writes.

Wire layout (broker.proto)::

    FetchResponse:      1 error_code varint | 2 error_message LEN | 3 high_watermark varint
                        | 4 last_stable_offset varint | 5 log_start_offset varint
                        | 6 records LEN | 7 next_offset varint | 8 throttle_time_ms varint
                        | 9 aborted_transactions LEN (repeated)
    AbortedTransaction: 1 producer_id varint | 2 first_offset varint

Unknown fields are skipped, as protobuf does; a truncated or malformed message raises
:class:`ValueError` (gRPC reports a failing deserialiser as an INTERNAL error on the call).
"""

from __future__ import annotations

from headwater.protowire import fields, int64


class FetchView:
    """The fields of one FetchResponse (proto3 defaults when absent)."""

    __slots__ = (
        "aborted",
        "error_code",
        "error_message",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "next_offset",
        "records",
        "throttle_time_ms",
    )

    def __init__(self) -> None:
        self.error_code = 0
        self.error_message = ""
        self.high_watermark = 0
        self.last_stable_offset = 0
        self.log_start_offset = 0
        self.records: memoryview = memoryview(b"")
        self.next_offset = 0
        self.throttle_time_ms = 0
        #: ``(producer_id, first_offset)`` of each AbortedTransaction, in wire order
        self.aborted: list[tuple[int, int]] = []


def _aborted(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    producer_id = first_offset = 0
    for number, wire_type, value, _ in fields(buf, pos, end, "AbortedTransaction"):
        if wire_type == 0 and number == 1:
            producer_id = int64(value)
        elif wire_type == 0 and number == 2:
            first_offset = int64(value)
    return producer_id, first_offset


def decode_fetch_response(data: bytes) -> FetchView:
    """Parse FetchResponse wire bytes; ``records`` is a view into ``data``."""
    out = FetchView()
    view = memoryview(data)
    for number, wire_type, a, b in fields(data, 0, len(data), "FetchResponse"):
        if wire_type == 0:
            value = int64(a)
            if number == 1:
                out.error_code = value
            elif number == 3:
                out.high_watermark = value
            elif number == 4:
                out.last_stable_offset = value
            elif number == 5:
                out.log_start_offset = value
            elif number == 7:
                out.next_offset = value
            elif number == 8:  # int32 throttle_time_ms
                out.throttle_time_ms = value
        elif number == 6:
            out.records = view[a:b]
        elif number == 2:
            out.error_message = str(view[a:b], "utf-8")
        elif number == 9:
            out.aborted.append(_aborted(data, a, b))
    return out
