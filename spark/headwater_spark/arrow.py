"""Headwater record batches -> Arrow record batches in the schema of Spark's Kafka source.

Spark's schema (``includeHeaders`` adds the last column)::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int, headers array<struct<key string, value binary>>

Conversion is per batch, never per record: key/value/headers are the Arrow views
:meth:`headwater.batch.RecordBatch.to_arrow` builds over the fetched bytes; the timestamp is one
vectorised cast (ms -> Spark's us, UTC); topic, partition and timestampType are constant columns
built from repeated buffers. A poll's batches go to Spark through :func:`coalesce`: large
ones as they are, small ones concatenated. The row path (:func:`to_rows`) exists for comparison
(``arrowBatches=false``, bench/spark_read.py) and does Python work per record.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:  # the driver imports this module for the schema only, not the decoder
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


def to_spark_batch(fb: FetchedBatch, include_headers: bool) -> pa.RecordBatch:
    """One Spark-schema Arrow batch for the records of ``fb`` (no per-record Python)."""
    rb = fb.to_arrow()
    n = rb.num_rows
    cols = [
        rb.column(2),  # key
        rb.column(3),  # value
        _constant_string(fb.tp.topic, n),
        pa.array(np.full(n, fb.tp.partition, dtype=np.int32)),
        rb.column(0),  # offset
        rb.column(1).cast(TIMESTAMP),
        pa.array(np.full(n, int(fb.batch.header.timestamp_type), dtype=np.int32)),
    ]
    names = list(NAMES)
    if include_headers:
        cols.append(rb.column(4).cast(HEADERS))
        names.append("headers")
    return pa.RecordBatch.from_arrays(cols, names=names)


#: An Arrow batch at least this large (``RecordBatch.nbytes``) crosses to the JVM as it is;
#: smaller consecutive ones are concatenated up to it (see :func:`coalesce`).
MIN_BATCH_BYTES = 256 * 1024


def concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """``batches`` as one Arrow batch (one copy per column unless there is only one)."""
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches).combine_chunks()
    return table.to_batches()[0]


def coalesce(
    batches: Iterable[pa.RecordBatch], min_bytes: int = MIN_BATCH_BYTES
) -> Iterator[pa.RecordBatch]:
    """The batches of one poll, in order, as few Arrow batches for Spark.

    A batch of at least ``min_bytes`` is yielded as it is (no copy: Spark's Python data
    source path sends every yielded ``RecordBatch`` to the JVM unchanged); runs of smaller
    consecutive batches are concatenated (one copy) until they reach ``min_bytes``, so small
    fetched batches still cross as few, larger ones. Every row is yielded once, in order.
    """
    run: list[pa.RecordBatch] = []
    size = 0
    for b in batches:
        if b.nbytes >= min_bytes:
            if run:
                yield concat(run)
                run, size = [], 0
            yield b
            continue
        run.append(b)
        size += b.nbytes
        if size >= min_bytes:
            yield concat(run)
            run, size = [], 0
    if run:
        yield concat(run)


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
