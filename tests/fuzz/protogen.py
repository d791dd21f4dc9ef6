"""Hypothesis strategies for any protobuf request message, built from its descriptor.

:func:`messages` walks a message descriptor and draws every field: integers biased to edge
values (0, ±1, the int32/int64 extremes) and to small ids, names from a pool of names that
exist in the fuzzed cluster (so handlers get past "unknown topic" and reach deeper code), random
text, random bytes, valid and corrupted record batches in ``bytes`` fields, unknown enum
numbers, maps, nested messages (bounded depth), and sometimes a *huge* repeated field or a huge
bytes/string value — sized so one request stays under :data:`MAX_REQUEST_BYTES` (the servers'
limit is 64 MiB; requests over it are tried by the bad-input table, not here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import strategies as st

from headwater.batch import encode_batch

#: Upper bound for the serialized size of one generated request.
MAX_REQUEST_BYTES = 8 * 1024 * 1024
_HUGE_BYTES = 2 * 1024 * 1024
_MAX_DEPTH = 4

I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)
_EDGE32 = [0, 1, -1, 2, 3, 100, 2**31 - 1, -(2**31), 2**15, 1 << 20]
_EDGE64 = [*_EDGE32, 2**63 - 1, -(2**63), 2**32, 1 << 40]

_FD = FieldDescriptor
_SIGNED32 = {_FD.TYPE_INT32, _FD.TYPE_SINT32, _FD.TYPE_SFIXED32}
_SIGNED64 = {_FD.TYPE_INT64, _FD.TYPE_SINT64, _FD.TYPE_SFIXED64}
_UNSIGNED32 = {_FD.TYPE_UINT32, _FD.TYPE_FIXED32}
_UNSIGNED64 = {_FD.TYPE_UINT64, _FD.TYPE_FIXED64}

_GOOD_BATCH = encode_batch([b"fuzz", b"value"], [b"k", None])


def _batches() -> st.SearchStrategy[bytes]:
    """Valid batches, and valid batches with one byte flipped or truncated."""

    def flip(at: int) -> bytes:
        b = bytearray(_GOOD_BATCH)
        b[at % len(b)] ^= 0xFF
        return bytes(b)

    return st.one_of(
        st.just(_GOOD_BATCH),
        st.integers(0, len(_GOOD_BATCH) - 1).map(flip),
        st.integers(0, len(_GOOD_BATCH)).map(lambda n: _GOOD_BATCH[:n]),
        st.integers(1, 3).map(lambda n: _GOOD_BATCH * n),
    )


def _int(lo: int, hi: int, edges: Sequence[int]) -> st.SearchStrategy[int]:
    return st.one_of(
        st.sampled_from([e for e in edges if lo <= e <= hi]),
        st.integers(max(lo, -2), min(hi, 10)),
        st.integers(lo, hi),
    )


def _scalar(field: FieldDescriptor, names: Sequence[str]) -> st.SearchStrategy[Any]:
    t = field.type
    if t in _SIGNED32:
        return _int(*I32, _EDGE32)
    if t in _SIGNED64:
        return _int(*I64, _EDGE64)
    if t in _UNSIGNED32:
        return _int(0, 2**32 - 1, _EDGE32)
    if t in _UNSIGNED64:
        return _int(0, 2**64 - 1, _EDGE64)
    if t == _FD.TYPE_BOOL:
        return st.booleans()
    if t == _FD.TYPE_FLOAT:
        return st.floats(width=32)
    if t == _FD.TYPE_DOUBLE:
        return st.floats()
    if t == _FD.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return st.sampled_from(numbers) | _int(*I32, _EDGE32)
    if t == _FD.TYPE_STRING:
        return st.one_of(
            st.sampled_from(list(names)),
            st.text(st.characters(exclude_categories=["Cs"]), max_size=30),
            st.integers(200, 300_000).map(lambda n: "x" * n),
        )
    if t == _FD.TYPE_BYTES:
        return st.one_of(
            st.binary(max_size=300),
            _batches(),
            st.integers(1, _HUGE_BYTES).map(lambda n: b"\xff" * n),
        )
    raise TypeError(f"unsupported field type {t} ({field.full_name})")


@st.composite
def _message(draw: st.DrawFn, desc: Descriptor, names: Sequence[str], depth: int) -> Any:
    msg = message_factory.GetMessageClass(desc)()
    for field in desc.fields:
        if not draw(st.booleans()):
            continue  # left at its default
        if field.type == _FD.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            key_f = field.message_type.fields_by_name["key"]
            val_f = field.message_type.fields_by_name["value"]
            if val_f.type == _FD.TYPE_MESSAGE:
                continue  # no map<_, message> in the API today
            entries = draw(
                st.dictionaries(_scalar(key_f, names), _scalar(val_f, names), max_size=4)
            )
            getattr(msg, field.name).update(entries)
            continue
        if field.type == _FD.TYPE_MESSAGE:
            if depth >= _MAX_DEPTH:
                continue
            elem: st.SearchStrategy[Any] = _message(field.message_type, names, depth + 1)
        else:
            elem = _scalar(field, names)
        if field.is_repeated:
            items = draw(st.lists(elem, max_size=4))
            if items and draw(st.integers(0, 9)) == 0:
                items = _huge(items, draw(st.integers(100, 50_000)))
            target = getattr(msg, field.name)
            if field.type == _FD.TYPE_MESSAGE:
                for item in items:
                    target.add().CopyFrom(item)
            else:
                target.extend(items)
        elif field.type == _FD.TYPE_MESSAGE:
            getattr(msg, field.name).CopyFrom(draw(elem))
        else:
            setattr(msg, field.name, draw(elem))
    if depth == 0 and msg.ByteSize() > MAX_REQUEST_BYTES:
        msg = _shrunk(msg)
    return msg


def _size(item: Any) -> int:
    if hasattr(item, "ByteSize"):
        return int(item.ByteSize()) + 4
    if isinstance(item, (bytes, str)):
        return len(item) + 4
    return 10


def _huge(items: list[Any], count: int) -> list[Any]:
    """``items`` repeated to ``count`` elements, capped so the field stays within budget."""
    per = max(1, max(_size(i) for i in items))
    count = max(len(items), min(count, MAX_REQUEST_BYTES // (2 * per)))
    return [items[i % len(items)] for i in range(count)]


def _shrunk(msg: Any) -> Any:
    """Clear the largest top-level fields until the message fits the budget."""
    fields = sorted(msg.ListFields(), key=lambda fv: -_field_size(fv[1]))
    for field, _value in fields:
        if msg.ByteSize() <= MAX_REQUEST_BYTES:
            break
        msg.ClearField(field.name)
    return msg


def _field_size(value: Any) -> int:
    if isinstance(value, (bytes, str)):
        return len(value)
    if hasattr(value, "ByteSize"):
        return int(value.ByteSize())
    try:
        return sum(_field_size(v) for v in value)
    except TypeError:
        return 8


def messages(desc: Descriptor, names: Sequence[str]) -> st.SearchStrategy[Any]:
    """Requests of message type ``desc``; strings drawn partly from ``names``."""
    return _message(desc, tuple(names), 0)
