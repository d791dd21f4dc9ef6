"""The records section: columns laid out as Arrow buffers, encoded and decoded whole.

Uncompressed layout (n = record_count; every array starts 8-byte aligned, zero padding
between arrays; all integers little-endian)::

    [if ATTR_HAS_OFFSET_DELTAS] i32 offset_delta[n]      absent: record i has offset delta i
    i32 timestamp_delta[n]                                ms relative to first_timestamp
    [if ATTR_HAS_KEYS]    u8  key_validity[ceil(n/8)]     Arrow bitmap, LSB first, 1 = present
                          i32 key_offsets[n+1]            Arrow offsets: 0, ..., len(key_data)
                          u8  key_data[key_offsets[n]]
                          (absent: every key is null)
    u8  value_validity[ceil(n/8)]                         0 = null value (tombstone)
    i32 value_offsets[n+1]
    u8  value_data[value_offsets[n]]
    [if ATTR_HAS_HEADERS] i32 header_offsets[n+1]         record i owns entries [o[i], o[i+1])
                          (h = header_offsets[n] entries)
                          i32 header_key_offsets[h+1]     UTF-8 header keys
                          u8  header_key_data
                          u8  header_value_validity[ceil(h/8)]
                          i32 header_value_offsets[h+1]
                          u8  header_value_data

Because each array is an Arrow buffer in Arrow's own layout, a decoded batch becomes Arrow
columns by pointing at these bytes (no value is copied), and encoding is a handful of joins and
numpy calls per batch, never a Python loop per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headwater.batch.decode_loops import binary_list
from headwater.batch.encode_loops import value_offsets
from headwater.errors import CorruptRecordError

_I32 = np.dtype("<i4")
_ZERO_PAD = b"\0" * 8

Binary = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]


def _pad(n: int) -> int:
    return -n % 8


@dataclass(frozen=True, slots=True)
class BinaryColumn:
    """An Arrow-layout binary column over a section buffer (views, no copies).

    ``validity`` is None when every value is present.
    """

    validity: memoryview | None
    offsets: np.ndarray  # int32[n+1]
    data: memoryview

    def to_pylist(self, start: int = 0, stop: int | None = None) -> list[bytes | None]:
        """Values ``start..stop`` (default: all; clamped to the column) as Python bytes (None
        for nulls); only the values asked for are converted (decode_loops.binary_list)."""
        n = len(self.offsets) - 1
        end = n if stop is None else min(stop, n)
        begin = min(start, end)
        return binary_list(self.validity, self.offsets, self.data, begin, end)


def _binary_array(pa_type: Any, col: BinaryColumn, n: int) -> Any:
    import pyarrow as pa

    validity = None if col.validity is None else pa.py_buffer(col.validity)
    return pa.Array.from_buffers(
        pa_type, n, [validity, pa.py_buffer(col.offsets), pa.py_buffer(col.data)]
    )


@dataclass(frozen=True, slots=True)
class Columns:
    """The decoded columns of one batch. All arrays are views into the section bytes."""

    count: int
    offset_deltas: np.ndarray | None  # int32[n] or None (dense: 0..n-1)
    timestamp_deltas: np.ndarray  # int32[n]
    keys: BinaryColumn | None  # None: all keys null
    values: BinaryColumn
    header_offsets: np.ndarray | None  # int32[n+1] or None: no headers
    header_keys: BinaryColumn | None
    header_values: BinaryColumn | None


# ---------------------------------------------------------------- encode


def _lengths_and_join(
    items: Sequence[Binary | None], *, what: str
) -> tuple[np.ndarray, bytes, bytes | None]:
    """Offsets, concatenated data and validity bitmap (None if no nulls) of ``items``."""
    offsets, present, validity = _lengths(items, what=what)
    try:
        data = b"".join(present)
    except TypeError as exc:
        raise TypeError(f"{what} must be bytes-like or None: {exc}") from None
    return offsets, data, validity


def _lengths(
    items: Sequence[Binary | None], *, what: str
) -> tuple[np.ndarray, Sequence[Binary], bytes | None]:
    """Offsets, the items with nulls as ``b""`` and validity bitmap (None if no nulls)."""
    fast = value_offsets(items)  # a list of bytes (the producer's columns): one C loop
    if fast is not None:
        return np.frombuffer(fast, dtype=_I32), items, None  # type: ignore[return-value]
    n = len(items)
    validity: bytes | None = None
    if None in items:  # a C-level scan; the null path does one pass to build the mask
        present = np.fromiter((v is not None for v in items), dtype=np.bool_, count=n)
        validity = np.packbits(present, bitorder="little").tobytes()
        items = [b"" if v is None else v for v in items]
    try:
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=n)  # type: ignore[arg-type]
    except TypeError as exc:
        raise TypeError(f"{what} must be bytes-like or None: {exc}") from None
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > 0x7FFFFFFF:
        raise ValueError(f"{what} of one batch exceed 2 GiB")
    return offsets.astype(_I32), items, validity  # type: ignore[return-value]


def _all_present_bitmap(n: int) -> bytes:
    full, rest = divmod(n, 8)
    return b"\xff" * full + (bytes([(1 << rest) - 1]) if rest else b"")


def _append(pieces: list[Binary], size: int, blob: bytes) -> int:
    pieces.append(blob)
    pad = _pad(len(blob))
    if pad:
        pieces.append(_ZERO_PAD[:pad])
    return size + len(blob) + pad


def encode_columns(
    values: Sequence[Binary | None],
    keys: Sequence[Binary | None] | None,
    headers: Sequence[Sequence[Header]] | None,
    timestamp_deltas: np.ndarray,
    offset_deltas: np.ndarray | None,
    *,
    values_as_pieces: bool = False,
) -> tuple[list[Binary], int, bool, bool]:
    """Encode the section; returns (pieces, size, has_keys, has_headers).

    ``pieces`` concatenated are the uncompressed section; ``size`` is their total length.
    ``values_as_pieces``: the values' data is not joined into one piece: each value is its
    own piece (the value objects themselves), so whoever joins the pieces copies each value
    once (a producer joining its request) instead of twice.
    """
    n = len(values)
    pieces: list[Binary] = []
    size = 0
    if offset_deltas is not None:
        size = _append(pieces, size, np.ascontiguousarray(offset_deltas, _I32).tobytes())
    size = _append(pieces, size, np.ascontiguousarray(timestamp_deltas, _I32).tobytes())

    has_keys = keys is not None and any(k is not None for k in keys)
    if has_keys:
        assert keys is not None
        if len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        k_off, k_data, k_valid = _lengths_and_join(keys, what="keys")
        size = _append(pieces, size, k_valid or _all_present_bitmap(n))
        size = _append(pieces, size, k_off.tobytes())
        size = _append(pieces, size, k_data)

    if values_as_pieces:
        v_off, v_items, v_valid = _lengths(values, what="values")
        size = _append(pieces, size, v_valid or _all_present_bitmap(n))
        size = _append(pieces, size, v_off.tobytes())
        pieces.extend(v_items)
        v_len = int(v_off[-1])
        pad = _pad(v_len)
        if pad:
            pieces.append(_ZERO_PAD[:pad])
        size += v_len + pad
    else:
        v_off, v_data, v_valid = _lengths_and_join(values, what="values")
        size = _append(pieces, size, v_valid or _all_present_bitmap(n))
        size = _append(pieces, size, v_off.tobytes())
        size = _append(pieces, size, v_data)

    has_headers = headers is not None and any(headers)
    if has_headers:
        assert headers is not None
        if len(headers) != n:
            raise ValueError(f"{len(headers)} header lists for {n} values")
        counts = np.fromiter(map(len, headers), dtype=np.int64, count=n)
        h_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=h_offsets[1:])
        flat = [h for hs in headers for h in hs]
        hkeys = [k.encode() if isinstance(k, str) else k for k, _ in flat]
        hvals = [v for _, v in flat]
        hk_off, hk_data, _ = _lengths_and_join(hkeys, what="header keys")
        hv_off, hv_data, hv_valid = _lengths_and_join(hvals, what="header values")
        size = _append(pieces, size, h_offsets.astype(_I32).tobytes())
        size = _append(pieces, size, hk_off.tobytes())
        size = _append(pieces, size, hk_data)
        size = _append(pieces, size, hv_valid or _all_present_bitmap(len(flat)))
        size = _append(pieces, size, hv_off.tobytes())
        size = _append(pieces, size, hv_data)
    return pieces, size, bool(has_keys), bool(has_headers)


# ---------------------------------------------------------------- decode


class _Reader:
    """Walks the section, handing out aligned views and checking every bound first."""

    def __init__(self, section: memoryview) -> None:
        self.buf = section
        self.pos = 0

    def take(self, nbytes: int, what: str) -> memoryview:
        if nbytes < 0 or self.pos + nbytes > len(self.buf):
            raise CorruptRecordError(
                f"records section too short for {what}: need {nbytes} bytes at {self.pos}, "
                f"have {len(self.buf) - self.pos}"
            )
        view = self.buf[self.pos : self.pos + nbytes]
        self.pos += nbytes + _pad(nbytes)
        return view

    def int32s(self, count: int, what: str) -> np.ndarray:
        return np.frombuffer(self.take(4 * count, what), dtype=_I32)

    def offsets(self, count: int, what: str) -> np.ndarray:
        off = self.int32s(count + 1, what)
        if off[0] != 0 or (count and bool(np.any(off[1:] < off[:-1]))):
            raise CorruptRecordError(f"{what} are not non-decreasing from 0")
        return off

    def binary(self, count: int, what: str, with_validity: bool = True) -> BinaryColumn:
        validity: memoryview | None = None
        if with_validity:
            validity = self.take((count + 7) // 8, f"{what} validity")
            if count and _all_present(validity, count):
                validity = None
        off = self.offsets(count, f"{what} offsets")
        data = self.take(int(off[-1]), f"{what} data")
        return BinaryColumn(validity, off, data)


def _all_present(bitmap: memoryview, count: int) -> bool:
    full, rest = divmod(count, 8)
    if bytes(bitmap[:full]) != b"\xff" * full:
        return False
    return not rest or (bitmap[full] & ((1 << rest) - 1)) == (1 << rest) - 1


def _check_utf8(col: BinaryColumn, count: int) -> None:
    """Header keys are strings: every entry must be valid UTF-8 (one C++ pass per batch)."""
    import pyarrow as pa

    if count == 0:
        return
    try:
        _binary_array(pa.string(), col, count).validate(full=True)
    except pa.ArrowInvalid as exc:
        raise CorruptRecordError(f"header keys are not valid UTF-8: {exc}") from None


def decode_columns(
    section: memoryview, count: int, *, has_keys: bool, has_headers: bool, has_offsets: bool
) -> Columns:
    """Parse the section into views; raises CorruptRecordError on any inconsistency."""
    r = _Reader(section)
    offset_deltas = r.int32s(count, "offset deltas") if has_offsets else None
    ts = r.int32s(count, "timestamp deltas")
    keys = r.binary(count, "keys") if has_keys else None
    values = r.binary(count, "values")
    h_off = hk = hv = None
    if has_headers:
        h_off = r.offsets(count, "header offsets")
        h = int(h_off[-1])
        hk = r.binary(h, "header keys", with_validity=False)
        _check_utf8(hk, h)
        hv = r.binary(h, "header values")
    if r.pos != len(section):
        raise CorruptRecordError(
            f"records section has {len(section) - r.pos} unexplained trailing bytes"
        )
    return Columns(count, offset_deltas, ts, keys, values, h_off, hk, hv)
