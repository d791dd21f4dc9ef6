"""ProduceRequest parsed by hand: each partition's records stay a view of the received bytes.

The generated deserialiser (``ProduceRequest.FromString``) copies every partition's batch bytes
into the message, and on a upb message every read of ``records`` builds a new ``bytes`` copy;
the servicer and the handler read it three times per partition — four copies of each MiB on
the event loop. ``Broker.Produce`` is registered with :func:`decode_produce_request` as its
request deserialiser instead (``services.broker.servicer.registrar``): one pass over the
message, and ``records`` is a ``memoryview`` slice of it (``Log.append`` copies only the
64-byte batch headers it patches). The objects returned have the attribute names of the
generated classes, so the handler reads either; a hypothesis test checks that protobuf's
serialisation parses to the same fields.

Wire layout (broker.proto)::

    ProduceRequest:   1 acks varint | 2 timeout_ms varint | 3 partitions LEN (repeated)
                      | 4 client_id LEN | 5 transactional_id LEN | 6 order_key varint
                      | 7 order_number varint | 8 order_after varint
    PartitionRecords: 1 topic LEN | 2 partition varint | 3 records LEN

Unknown fields are skipped, as protobuf does; a malformed message raises :class:`ValueError`
(the request-limit interceptor, :mod:`headwater.platform.limits`, answers it INVALID_REQUEST). More
than ``max_partitions`` partition entries stop the parse at once with
:class:`~headwater.errors.InvalidRequestError` (the parse is Python: a request of a million
tiny entries would otherwise hold a thread for seconds before the shape check refuses it).
"""

from __future__ import annotations

from headwater.errors import InvalidRequestError
from headwater.platform.limits import DEFAULT_LIMITS
from headwater.protowire import fields, int32, uint64


class PartitionRecordsView:
    """One ``PartitionRecords`` entry."""

    __slots__ = ("partition", "records", "topic")

    def __init__(self) -> None:
        self.topic = ""
        self.partition = 0
        self.records: memoryview = memoryview(b"")


class ProduceRequestView:
    """The fields of one ProduceRequest (proto3 defaults when absent)."""

    __slots__ = (
        "acks",
        "client_id",
        "order_after",
        "order_key",
        "order_number",
        "partitions",
        "timeout_ms",
        "transactional_id",
    )

    def __init__(self) -> None:
        self.acks = 0
        self.timeout_ms = 0
        self.partitions: list[PartitionRecordsView] = []
        self.client_id = ""
        self.transactional_id = ""
        self.order_key = 0
        self.order_number = 0
        self.order_after = 0


def _partition(view: memoryview, pos: int, end: int) -> PartitionRecordsView:
    out = PartitionRecordsView()
    for number, wire_type, a, b in fields(view, pos, end, "PartitionRecords"):
        if wire_type == 0 and number == 2:
            out.partition = int32(a)
        elif wire_type == 2 and number == 1:
            out.topic = str(view[a:b], "utf-8")
        elif wire_type == 2 and number == 3:
            out.records = view[a:b]
    return out


def decode_produce_request(
    data: bytes, max_partitions: int = DEFAULT_LIMITS.bulk.max_entries
) -> ProduceRequestView:
    """Parse ProduceRequest wire bytes; every ``records`` is a view into ``data``."""
    out = ProduceRequestView()
    view = memoryview(data)
    for number, wire_type, a, b in fields(data, 0, len(data), "ProduceRequest"):
        if wire_type == 0:
            if number == 1:
                out.acks = int32(a)
            elif number == 2:
                out.timeout_ms = int32(a)
            elif number == 6:
                out.order_key = uint64(a)
            elif number == 7:
                out.order_number = uint64(a)
            elif number == 8:
                out.order_after = uint64(a)
        elif number == 3:
            if len(out.partitions) >= max_partitions:
                raise InvalidRequestError(
                    f"Broker.Produce: ProduceRequest.partitions has more than "
                    f"{max_partitions} entries; the limit is {max_partitions}"
                )
            out.partitions.append(_partition(view, a, b))
        elif number == 4:
            out.client_id = str(view[a:b], "utf-8")
        elif number == 5:
            out.transactional_id = str(view[a:b], "utf-8")
    return out
