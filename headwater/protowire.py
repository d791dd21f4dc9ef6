"""Protobuf wire primitives for the hand-written parsers and writers of the hot RPCs.

:mod:`headwater.client.fetch_wire` (FetchResponse, on the consumer),
:mod:`services.broker.handlers.produce_wire` (ProduceRequest, on the broker) and
:mod:`services.broker.replication.fetch_wire` (ReplicaFetchResponse, on the follower) read
messages of ``proto/`` by hand so that the record bytes stay ``memoryview`` slices of what
gRPC received; :mod:`headwater.client.produce_wire` (ProduceRequest) and the leader's side of
``services.broker.replication.fetch_wire`` write them by hand so that each record byte is
copied once, into the message. All use these primitives. The encoding is protobuf's
(https://protobuf.dev/programming-guides/encoding/): a field is a varint key
``field_number << 3 | wire_type`` followed by a varint (type 0), 8 bytes (1), a varint length
and that many bytes (2) or 4 bytes (5). Reading past the end raises IndexError, which each
parser turns into ValueError.
"""

from __future__ import annotations

from collections.abc import Iterator

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


def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint; negative int32/int64 values take 10 bytes (two's complement)."""
    if value < 0:
        value += _U64
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def uint64(value: int) -> int:
    """A uint64 field's value (a varint's low 64 bits, as protobuf keeps them)."""
    return value & (_U64 - 1)


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


def fields(buf: Buffer, pos: int, end: int, what: str) -> Iterator[tuple[int, int, int, int]]:
    """The fields of the ``what`` message in ``buf[pos:end]``, in wire order, as
    ``(number, wire_type, a, b)``: a varint field (wire type 0) with its raw value ``a``
    (``b``: the position after it), a length-delimited one (2) with the span ``buf[a:b]`` of
    its bytes. Fixed-width fields (1, 5) are skipped, as protobuf skips unknown fields; the
    caller skips numbers it does not know, or that come with another wire type. A field that
    runs past ``end``, a malformed varint or a message cut short raises
    ``ValueError("truncated <what>")``."""
    try:
        while pos < end:
            key, pos = varint(buf, pos)
            number, wire_type = key >> 3, key & 7
            if wire_type == 0:
                value, pos = varint(buf, pos)
                yield number, 0, value, pos
            elif wire_type == 2:
                n, start = varint(buf, pos)
                pos = start + n
                if pos > end:
                    raise ValueError(f"truncated {what}")
                yield number, 2, start, pos
            else:
                pos = skip(buf, pos, wire_type)
    except IndexError as exc:
        raise ValueError(f"truncated {what}") from exc
    if pos != end:
        raise ValueError(f"truncated {what}")
