"""Protobuf wire primitives for the hand-written parsers of the hot RPCs.

:mod:`headwater.client.fetch_wire` (FetchResponse, on the consumer) and
:mod:`services.broker.handlers.produce_wire` (ProduceRequest, on the broker) read messages of
``proto/`` by hand so that the record bytes stay ``memoryview`` slices of what gRPC received;
both use these primitives. The encoding is protobuf's
(https://protobuf.dev/programming-guides/encoding/): a field is a varint key
``field_number << 3 | wire_type`` followed by a varint (type 0), 8 bytes (1), a varint length
and that many bytes (2) or 4 bytes (5). Reading past the end raises IndexError, which each
parser turns into ValueError.
"""

from __future__ import annotations

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1

Buffer = bytes | memoryview


def varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def int64(value: int) -> int:
    """An int64 field's value: negative numbers are sent as 64-bit two's complement."""
    value &= _U64 - 1
    return value - _U64 if value > _I64_MAX else value


def int32(value: int) -> int:
    """An int32/enum field's value (sent sign-extended to 64 bits, kept to 32 as protobuf does)."""
    return ((int64(value) + 2**31) % 2**32) - 2**31


def skip(buf: Buffer, pos: int, wire_type: int) -> int:
    """The position after the value of an unknown field of ``wire_type`` starting at ``pos``."""
    if wire_type == 0:
        return varint(buf, pos)[1]
    if wire_type == 1:
        return pos + 8
    if wire_type == 2:
        n, pos = varint(buf, pos)
        return pos + n
    if wire_type == 5:
        return pos + 4
    raise ValueError(f"unsupported wire type {wire_type}")
