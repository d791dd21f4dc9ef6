"""Deterministic hostile requests for every RPC, built from its request descriptor.

Next to the hypothesis campaign (:mod:`tests.fuzz.campaign`), every RPC of
:func:`tests.fuzz.rpcs.all_rpcs` gets the same fixed set of hostile requests, so a new RPC
(or a new repeated field) is covered without editing anything here. The kinds
(:data:`KINDS`):

* ``garbage`` — seeded random bytes of several lengths, plus three crafted wire errors: a
  length prefix claiming 4 GiB, an overlong varint, and 200 nested length-delimited fields;
* ``truncated`` — the serialized ``absent`` request (below) cut at a few points;
* ``inflated`` — for *each* repeated field, at any depth (``OffsetFetchRequest.partitions[]
  .partitions``), a request whose field holds ``Scale.entries`` distinct entries (10^6 in
  CI, 10^7 for ``make fuzz-long``), packed where the field is packable, at most
  ``Scale.budget`` bytes (a few MB to tens of MB); every string in it is a given name (the
  fuzz cluster's topic, so handlers get past "unknown topic"); written on the wire
  directly, the way a hostile client would, not through the protobuf API;
* ``absent`` — a well-formed request in which every field is set and every name, id and
  number names something that does not exist (``hw-absent-<field>``, 7);
* ``empty`` — the request with every field at its default;
* ``huge`` — every string and bytes field ``Scale.huge_text`` long, every number at its
  type's maximum (enums 2^31-1);
* ``negative`` — every number -1 (unsigned: 2^N-1), enums -1;
* ``minimum`` — every number at its type's minimum;
* ``unknown-enum`` — the ``absent`` request with every enum at a number no enum defines.

Requests are bytes (client-streaming RPCs send them as a one-message stream), built lazily
by :meth:`Case.payload` so inflated ones exist only while they are sent.
"""

from __future__ import annotations

import functools
import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from headwater.batch import encode_batch
from tests.fuzz.rpcs import Rpc

KINDS = (
    "garbage", "truncated", "inflated", "absent", "empty", "huge", "negative", "minimum",
    "unknown-enum",
)  # fmt: skip
ABSENT = "hw-absent"
UNKNOWN_ENUM = 12345
_MAX_DEPTH = 5

_FD = FieldDescriptor
_VARINT = {_FD.TYPE_INT32, _FD.TYPE_INT64, _FD.TYPE_UINT32, _FD.TYPE_UINT64, _FD.TYPE_ENUM}
_ZIGZAG = {_FD.TYPE_SINT32, _FD.TYPE_SINT64}
_FIXED32 = {_FD.TYPE_FIXED32, _FD.TYPE_SFIXED32, _FD.TYPE_FLOAT}
_FIXED64 = {_FD.TYPE_FIXED64, _FD.TYPE_SFIXED64, _FD.TYPE_DOUBLE}
_RANGES = {
    _FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _FD.TYPE_UINT32: (0, 2**32 - 1),
    _FD.TYPE_FIXED32: (0, 2**32 - 1),
    _FD.TYPE_UINT64: (0, 2**64 - 1),
    _FD.TYPE_FIXED64: (0, 2**64 - 1),
    _FD.TYPE_ENUM: (-(2**31), 2**31 - 1),
}
_GOOD_BATCH = encode_batch([b"hostile"], [b"k"])


@dataclass(frozen=True)
class Scale:
    """How big the hostile requests get."""

    entries: int = 1_000_000  # entries of an inflated repeated field
    budget: int = 56 << 20  # bytes of an inflated request (gRPC's limit is 64 MiB)
    huge_text: int = 1 << 20  # bytes of each string/bytes field of a ``huge`` request
    random_lengths: tuple[int, ...] = (1, 5, 64, 1000, 65536)


CI = Scale()
LONG = Scale(entries=10_000_000, budget=60 << 20, huge_text=4 << 20,
             random_lengths=(1, 2, 3, 5, 8, 13, 64, 333, 1000, 4096, 65536, 1 << 20))  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One hostile request for one RPC."""

    rpc: Rpc
    kind: str
    label: str
    build: Callable[[], bytes]

    def payload(self) -> bytes:
        return self.build()

    def request(self) -> Any:
        """What :func:`tests.fuzz.rpcs.call` sends: the bytes, or a one-message stream."""
        data = self.payload()
        return [data] if self.rpc.method.client_streaming else data


# ---- wire encoding


def varint(n: int) -> bytes:
    """Protobuf's varint of ``n`` (negative numbers as their 64-bit two's complement)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def _len_field(number: int, body: bytes) -> bytes:
    return _key(number, 2) + varint(len(body)) + body


def _scalar_bytes(field: FieldDescriptor, n: int) -> bytes:
    """One packed element of a packable field holding ``n``."""
    t = field.type
    if t in _VARINT or t == _FD.TYPE_BOOL:
        return varint(n if t != _FD.TYPE_BOOL else n & 1)
    if t in _ZIGZAG:
        return varint((n << 1) ^ (n >> 63))
    if t in _FIXED32:
        return struct.pack("<I", n & 0xFFFFFFFF)
    if t in _FIXED64:
        return struct.pack("<Q", n & (2**64 - 1))
    raise TypeError(f"{field.full_name} is not packable")


# ---- filled messages (protobuf API)


@dataclass(frozen=True)
class Fill:
    """The value every field of a filled request gets."""

    text: Callable[[FieldDescriptor], str]
    data: Callable[[FieldDescriptor], bytes]
    number: Callable[[FieldDescriptor], int]
    enum: Callable[[FieldDescriptor], int]
    real: float


def _first_nonzero_enum(field: FieldDescriptor) -> int:
    numbers = [v.number for v in field.enum_type.values]
    return next((n for n in numbers if n != 0), numbers[0])


def _absent_number(field: FieldDescriptor) -> int:
    return 7


ABSENT_FILL = Fill(
    text=lambda f: f"{ABSENT}-{f.name}",
    data=lambda f: _GOOD_BATCH,
    number=_absent_number,
    enum=_first_nonzero_enum,
    real=7.0,
)


def named(name: str) -> Fill:
    """:data:`ABSENT_FILL` with every string ``name`` (inflated requests: a topic that
    exists, so handlers get past the name check into the per-entry work)."""
    return Fill(
        text=lambda f: name,
        data=ABSENT_FILL.data,
        number=ABSENT_FILL.number,
        enum=ABSENT_FILL.enum,
        real=ABSENT_FILL.real,
    )


def _fills(scale: Scale) -> dict[str, Fill]:
    huge_text, huge_data = "x" * scale.huge_text, b"\xff" * scale.huge_text
    return {
        "absent": ABSENT_FILL,
        "huge": Fill(
            text=lambda f: huge_text,
            data=lambda f: huge_data,
            number=lambda f: _RANGES[f.type][1],
            enum=lambda f: 2**31 - 1,
            real=1e300,
        ),
        "negative": Fill(
            text=ABSENT_FILL.text,
            data=ABSENT_FILL.data,
            number=lambda f: -1 if _RANGES[f.type][0] < 0 else _RANGES[f.type][1],
            enum=lambda f: -1,
            real=-1.0,
        ),
        "minimum": Fill(
            text=ABSENT_FILL.text,
            data=ABSENT_FILL.data,
            number=lambda f: _RANGES[f.type][0],
            enum=lambda f: -(2**31),
            real=float("-inf"),
        ),
        "unknown-enum": Fill(
            text=ABSENT_FILL.text,
            data=ABSENT_FILL.data,
            number=_absent_number,
            enum=lambda f: UNKNOWN_ENUM,
            real=7.0,
        ),
    }


def _value(field: FieldDescriptor, fill: Fill) -> Any:
    t = field.type
    if t == _FD.TYPE_STRING:
        return fill.text(field)
    if t == _FD.TYPE_BYTES:
        return fill.data(field)
    if t == _FD.TYPE_BOOL:
        return True
    if t in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
        return fill.real
    if t == _FD.TYPE_ENUM:
        return fill.enum(field)
    return fill.number(field)


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == _FD.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def filled(desc: Descriptor, fill: Fill, *, lean: bool = False, depth: int = 0) -> Any:
    """A message of type ``desc`` with every field set by ``fill``: one element per repeated
    field, one entry per map, nested messages filled too (to a bounded depth). ``lean``:
    only the singular scalar fields, short texts (an inflated field's element)."""
    msg = message_factory.GetMessageClass(desc)()
    for field in desc.fields:
        if _is_map(field):
            if lean:
                continue
            key_f, val_f = (field.message_type.fields_by_name[n] for n in ("key", "value"))
            if val_f.type != _FD.TYPE_MESSAGE:
                getattr(msg, field.name)[_value(key_f, fill)] = _value(val_f, fill)
            elif depth < _MAX_DEPTH:
                getattr(msg, field.name)[_value(key_f, fill)].CopyFrom(
                    filled(val_f.message_type, fill, depth=depth + 1)
                )
        elif field.type == _FD.TYPE_MESSAGE:
            if lean or depth >= _MAX_DEPTH:
                continue
            sub = filled(field.message_type, fill, depth=depth + 1)
            if field.is_repeated:
                getattr(msg, field.name).add().CopyFrom(sub)
            else:
                getattr(msg, field.name).CopyFrom(sub)
        elif field.is_repeated:
            if not lean:
                getattr(msg, field.name).append(_value(field, fill))
        elif lean and field.type == _FD.TYPE_STRING:
            setattr(msg, field.name, fill.text(field))
        elif lean and field.type == _FD.TYPE_BYTES:
            setattr(msg, field.name, b"x")
        else:
            setattr(msg, field.name, _value(field, fill))
    return msg


def _serialized(desc: Descriptor, fill: Fill = ABSENT_FILL) -> bytes:
    return bytes(filled(desc, fill).SerializeToString())


# ---- repeated fields and their inflation


def repeated_paths(
    desc: Descriptor, depth: int = 0, seen: tuple[str, ...] = ()
) -> list[tuple[FieldDescriptor, ...]]:
    """Every repeated field (maps included) reachable from ``desc``, as the path of fields
    leading to it (recursive message types are followed once)."""
    out: list[tuple[FieldDescriptor, ...]] = []
    for field in desc.fields:
        if field.is_repeated:
            out.append((field,))
        if field.type == _FD.TYPE_MESSAGE and not _is_map(field) and depth < _MAX_DEPTH:
            sub = field.message_type
            if sub.full_name in seen:
                continue
            for path in repeated_paths(sub, depth + 1, (*seen, desc.full_name)):
                out.append((field, *path))
    return out


def path_name(path: tuple[FieldDescriptor, ...]) -> str:
    return ".".join(f.name for f in path)


def _distinct_int_field(desc: Descriptor) -> FieldDescriptor | None:
    """A singular varint field of ``desc`` an element can carry its own number in."""
    for field in desc.fields:
        if not field.is_repeated and field.type in _VARINT - {_FD.TYPE_ENUM}:
            return field
    return None


@functools.cache
def _numbers(count: int) -> list[bytes]:
    """``count`` distinct numbers as 4-byte varints (2^21 + i: every one is canonical and of
    the same width, so inflated fields are written with ``bytes.join``)."""
    return [varint(2**21 + i) for i in range(count)]


@functools.cache
def _digits(count: int) -> list[bytes]:
    """``count`` distinct 8-digit ASCII numbers (for strings)."""
    return [b"%08d" % i for i in range(count)]


def _series(head: bytes, items: list[bytes], tail: bytes) -> bytes:
    """``head + item + tail`` for every item, concatenated."""
    if not items:
        return b""
    return head + (tail + head).join(items) + tail


def _leaf(
    field: FieldDescriptor, scale: Scale, budget: int, fill: Fill
) -> tuple[int, Callable[[], bytes]]:
    """How many distinct entries repeated ``field`` gets within ``scale`` and ``budget``
    bytes, and how to write them on the wire."""
    key = _key(field.number, 2)
    if field.is_packed:
        count = min(scale.entries, budget // 8)
        if field.type in _VARINT:
            return count, lambda: _len_field(field.number, b"".join(_numbers(count)))
        return count, lambda: _len_field(
            field.number, b"".join(_scalar_bytes(field, i) for i in range(count))
        )
    if field.type in (_FD.TYPE_STRING, _FD.TYPE_BYTES):
        head = key + varint(len(ABSENT) + 8) + ABSENT.encode()
        count = min(scale.entries, budget // (len(head) + 8))
        return count, lambda: _series(head, _digits(count), b"")
    if field.type != _FD.TYPE_MESSAGE:  # a non-packed scalar (not in the API today)
        key = _key(field.number, 0 if field.type in _VARINT | _ZIGZAG else 2)
        count = min(scale.entries, budget // (len(key) + 10))
        return count, lambda: b"".join(key + _scalar_bytes(field, i) for i in range(count))
    head, tail, numbered = _element(field, fill)
    count = min(scale.entries, budget // (len(head) + len(tail) + 8))
    if not numbered:
        return count, lambda: (head + tail) * count
    return count, lambda: _series(head, (_digits if numbered == "text" else _numbers)(count), tail)


def _element(field: FieldDescriptor, fill: Fill) -> tuple[bytes, bytes, str]:
    """Entry ``i`` of repeated message (or map) ``field`` on the wire is ``head + n_i +
    tail``: a lean ``absent`` element carrying ``n_i`` (a 4-byte varint; "number") in its
    first integer field, or a map entry with key ``k<8 digits>`` ("text") or ``n_i``;
    ``numbered`` is "" when the element has no field to carry it (entries repeat)."""
    elem_desc = field.message_type
    outer = _key(field.number, 2)
    if _is_map(field):
        map_key = elem_desc.fields_by_name["key"]
        value = elem_desc.fields_by_name["value"]
        tail = b"" if value.type == _FD.TYPE_MESSAGE else _field_bytes(value, fill)
        if map_key.type == _FD.TYPE_STRING:
            inner = _key(map_key.number, 2) + varint(9) + b"k"
            return outer + varint(len(inner) + 8 + len(tail)) + inner, tail, "text"
        inner = _key(map_key.number, 0)
        return outer + varint(len(inner) + 4 + len(tail)) + inner, tail, "number"
    base = bytes(filled(elem_desc, fill, lean=True).SerializeToString())
    distinct = _distinct_int_field(elem_desc)
    if distinct is None:
        return outer + varint(len(base)) + base, b"", ""
    inner = base + _key(distinct.number, 0)
    return outer + varint(len(inner) + 4) + inner, b"", "number"


def _field_bytes(field: FieldDescriptor, fill: Fill) -> bytes:
    """One singular scalar field on the wire (a map entry's value)."""
    value = _value(field, fill)
    if field.type == _FD.TYPE_STRING:
        return _len_field(field.number, value.encode())
    if field.type == _FD.TYPE_BYTES:
        return _len_field(field.number, value)
    wire = 5 if field.type in _FIXED32 else 1 if field.type in _FIXED64 else 0
    return _key(field.number, wire) + _scalar_bytes(field, int(value))


def _plan(
    desc: Descriptor, path: tuple[FieldDescriptor, ...], scale: Scale, budget: int, fill: Fill
) -> tuple[int, Callable[[], bytes]]:
    head, *rest = path
    base = _serialized(desc, fill)
    if not rest:
        count, leaf = _leaf(head, scale, budget - len(base), fill)
        return count, lambda: base + leaf()
    count, inner = _plan(head.message_type, tuple(rest), scale, budget - len(base) - 16, fill)
    return count, lambda: base + _len_field(head.number, inner())


def inflated(
    desc: Descriptor, path: tuple[FieldDescriptor, ...], scale: Scale, name: str = ABSENT
) -> tuple[int, Callable[[], bytes]]:
    """The entry count and the builder of a request of type ``desc``: the request with
    every field set (strings ``name``) plus, along ``path``, one more element whose last
    field holds the inflated entries (protobuf concatenation merges messages and appends
    to repeated fields, so the request is well-formed)."""
    return _plan(desc, path, scale, scale.budget, named(name))


# ---- garbage


def _garbage(rpc: Rpc, scale: Scale) -> Iterator[tuple[str, Callable[[], bytes]]]:
    for n in scale.random_lengths:
        seed = f"{rpc.name}/{n}"
        yield f"{n} random bytes", functools.partial(_random_bytes, seed, n)
    yield "length prefix of 4 GiB", lambda: _key(1, 2) + varint(2**32) + b"x" * 16
    yield "overlong varint", lambda: _key(1, 0) + b"\xff" * 11 + b"\x01"
    nested = b""
    for _ in range(200):
        nested = _len_field(1, nested)
    yield "200 nested length-delimited fields", lambda: nested


def _random_bytes(seed: str, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _has_enum(desc: Descriptor, depth: int = 0) -> bool:
    for field in desc.fields:
        if field.type == _FD.TYPE_ENUM:
            return True
        nested = field.type == _FD.TYPE_MESSAGE and depth < _MAX_DEPTH
        if nested and _has_enum(field.message_type, depth + 1):
            return True
    return False


def cases(rpc: Rpc, scale: Scale = CI, name: str = ABSENT) -> list[Case]:
    """Every hostile case for ``rpc`` (cheap to list; payloads are built when asked);
    ``name``: the string of every field of the inflated requests (a topic that exists)."""
    desc = rpc.method.input_type
    out = [Case(rpc, "garbage", label, build) for label, build in _garbage(rpc, scale)]
    valid = _serialized(desc)
    for cut in sorted({1, len(valid) // 3, len(valid) // 2, len(valid) - 1}):
        if 0 < cut < len(valid):
            label = f"first {cut} of {len(valid)} bytes"
            out.append(Case(rpc, "truncated", label, functools.partial(bytes, valid[:cut])))
    for path in repeated_paths(desc):
        count, build = inflated(desc, path, scale, name)
        packed = " packed" if path[-1].is_packed else ""
        out.append(Case(rpc, "inflated", f"{path_name(path)} x{count}{packed}", build))
    out.append(Case(rpc, "empty", "every field at its default", lambda: b""))
    for kind, fill in _fills(scale).items():
        if kind == "unknown-enum" and not _has_enum(desc):
            continue
        out.append(Case(rpc, kind, f"{kind} values", functools.partial(_serialized, desc, fill)))
    return out
