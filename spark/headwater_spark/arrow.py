"""Headwater record batches -> Arrow record batches in the schema of Spark's Kafka source.

Spark's schema (``includeHeaders`` adds the last column)::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int, headers array<struct<key string, value binary>>

Conversion is per poll, column by column, never per record (:func:`spark_batches`): the
key/value/header bytes of all the poll's batches are joined into one buffer per column with
their offsets shifted, the timestamp is one vectorised multiply (ms -> Spark's us, UTC), topic,
partition and timestampType are repeated values. The row path (:func:`to_rows`) exists for
comparison (``arrowBatches=false``, bench/spark_read.py) and does Python work per record.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:  # the driver imports this module for the schema only, not the decoder
    from headwater.batch.columns import BinaryColumn, Columns
    from headwater.client.fetched import FetchedBatch

TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADER_ENTRY = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS = pa.list_(pa.field("element", HEADER_ENTRY))

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"

NAMES = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def schema_ddl(include_headers: bool) -> str:
    return SCHEMA_DDL + (HEADERS_DDL if include_headers else "")


def _constant_string(s: str, n: int) -> pa.Array:
    raw = s.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)]
    )


#: Arrow ``binary``/``string`` offsets are int32: one output batch's bytes per column stay below
INT32_MAX = 2**31 - 1


def spark_batches(
    pieces: Sequence[FetchedBatch], include_headers: bool
) -> Iterator[pa.RecordBatch]:
    """The records of ``pieces`` (fetched batch slices, in order) as Spark-schema Arrow
    batches, normally one for the lot (more only when a column's bytes would pass 2 GiB).

    Built column by column over all pieces at once: per piece only a few numpy slices, then
    one concatenation per column. A poll of a partition written by small producer batches
    (a few records each: many producers, many partitions, short linger) holds hundreds of
    batches; converting each to Arrow on its own and concatenating afterwards cost about
    as much Python per batch as the records' bytes, so the work followed the number of
    batches, not records. No per-record Python.
    """
    group: list[FetchedBatch] = []
    size = 0
    for fb in pieces:
        n = _bytes_of(fb)
        if group and size + n > INT32_MAX:
            yield _one_batch(group, include_headers)
            group, size = [], 0
        group.append(fb)
        size += n
    if group:
        yield _one_batch(group, include_headers)


def _bytes_of(fb: FetchedBatch) -> int:
    """The most bytes one column of ``fb``'s records can hold (keys, values or headers)."""
    c = fb.batch.columns
    return max(
        0 if c.keys is None else int(c.keys.offsets[fb.stop] - c.keys.offsets[fb.start]),
        int(c.values.offsets[fb.stop] - c.values.offsets[fb.start]),
        _header_bytes(c, fb.start, fb.stop),
    )


def _header_bytes(c: Columns, start: int, stop: int) -> int:
    if c.header_offsets is None:
        return 0
    assert c.header_keys is not None and c.header_values is not None
    lo, hi = int(c.header_offsets[start]), int(c.header_offsets[stop])
    return max(
        int(c.header_keys.offsets[hi] - c.header_keys.offsets[lo]),
        int(c.header_values.offsets[hi] - c.header_values.offsets[lo]),
    )


def _one_batch(pieces: Sequence[FetchedBatch], include_headers: bool) -> pa.RecordBatch:
    counts = np.array([len(fb) for fb in pieces], dtype=np.int64)
    n = int(counts.sum())
    offsets = np.concatenate([fb.offsets() for fb in pieces]).astype(np.int64, copy=False)
    ts_us = np.concatenate([fb.timestamps() for fb in pieces]).astype(np.int64) * 1000
    parts = np.repeat([fb.tp.partition for fb in pieces], counts).astype(np.int32)
    ttypes = np.repeat([int(fb.batch.header.timestamp_type) for fb in pieces], counts)
    topics = {fb.tp.topic for fb in pieces}
    if len(topics) == 1:
        topic = _constant_string(next(iter(topics)), n)
    else:
        topic = pa.array(np.repeat([fb.tp.topic for fb in pieces], counts).tolist(), pa.string())
    cols = [
        _binary(pa.binary(), [(fb.batch.columns.keys, fb.start, fb.stop) for fb in pieces]),
        _binary(pa.binary(), [(fb.batch.columns.values, fb.start, fb.stop) for fb in pieces]),
        topic,
        pa.array(parts, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.Array.from_buffers(TIMESTAMP, n, [None, pa.py_buffer(ts_us)]),
        pa.array(ttypes.astype(np.int32), pa.int32()),
    ]
    names = list(NAMES)
    if include_headers:
        cols.append(_headers(pieces, n))
        names.append("headers")
    return pa.RecordBatch.from_arrays(cols, names=names)


def _binary(pa_type: pa.DataType, parts: list[tuple[BinaryColumn | None, int, int]]) -> pa.Array:
    """One Arrow binary/string array of entries ``[lo, hi)`` of each column, in order (a
    column of None: that many nulls, as a batch without keys has). The bytes are copied
    once (not at all for a single part)."""
    data: list[memoryview] = []
    offs: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
    base = n = 0
    for col, lo, hi in parts:
        n += hi - lo
        if col is None:
            offs.append(np.full(hi - lo, base, dtype=np.int64))
            continue
        o = col.offsets
        a, b = int(o[lo]), int(o[hi])
        data.append(col.data[a:b])
        offs.append(o[lo + 1 : hi + 1].astype(np.int64) - a + base)
        base += b - a
    offsets = pa.py_buffer(np.concatenate(offs).astype(np.int32))
    blob = pa.py_buffer(data[0] if len(data) == 1 else b"".join(data))
    return pa.Array.from_buffers(pa_type, n, [_validity(parts), offsets, blob])


def _validity(parts: list[tuple[BinaryColumn | None, int, int]]) -> pa.Buffer | None:
    """The validity bitmap of :func:`_binary`'s array; None when every entry is present."""
    if all(col is not None and col.validity is None for col, _, _ in parts):
        return None
    masks = []
    for col, lo, hi in parts:
        if col is None:
            masks.append(np.zeros(hi - lo, dtype=np.uint8))
        elif col.validity is None:
            masks.append(np.ones(hi - lo, dtype=np.uint8))
        else:
            bits = np.unpackbits(np.frombuffer(col.validity, dtype=np.uint8), bitorder="little")
            masks.append(bits[lo:hi])
    return pa.py_buffer(np.packbits(np.concatenate(masks), bitorder="little"))


def _headers(pieces: Sequence[FetchedBatch], n: int) -> pa.Array:
    """Spark's headers column (a list of key/value structs per record) over all pieces."""
    lists: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
    keys: list[tuple[BinaryColumn | None, int, int]] = []
    values: list[tuple[BinaryColumn | None, int, int]] = []
    base = 0
    for fb in pieces:
        c = fb.batch.columns
        if c.header_offsets is None:
            lists.append(np.full(len(fb), base, dtype=np.int64))
            continue
        ho = c.header_offsets
        lo, hi = int(ho[fb.start]), int(ho[fb.stop])
        lists.append(ho[fb.start + 1 : fb.stop + 1].astype(np.int64) - lo + base)
        keys.append((c.header_keys, lo, hi))
        values.append((c.header_values, lo, hi))
        base += hi - lo
    entries = pa.StructArray.from_arrays(
        [_binary(pa.string(), keys), _binary(pa.binary(), values)], fields=list(HEADER_ENTRY)
    )
    offsets = pa.py_buffer(np.concatenate(lists).astype(np.int32))
    return pa.ListArray.from_buffers(HEADERS, n, [None, offsets], children=[entries])


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def to_rows(fb: FetchedBatch, include_headers: bool) -> Iterator[tuple[Any, ...]]:
    """The row path: one Python tuple per record (for comparison with the Arrow path)."""
    ttype = int(fb.batch.header.timestamp_type)
    for r in fb.records():
        row: tuple[Any, ...] = (
            r.key,
            r.value,
            r.topic,
            r.partition,
            r.offset,
            _EPOCH + dt.timedelta(milliseconds=r.timestamp),
            ttype,
        )
        if include_headers:
            row = (*row, [(k, v) for k, v in r.headers])
        yield row
