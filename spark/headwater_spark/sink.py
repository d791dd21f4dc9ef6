"""``df.write.format("headwater")`` and ``df.writeStream.format("headwater")``: the sink.

Input columns (as Spark's Kafka sink; other columns are ignored):

    value    binary or string, required (null: a tombstone)
    key      binary or string, optional (null or absent: no key; sticky partitioning)
    topic    string, optional; the ``topic`` option is the default for absent/null values
    partition int, optional; null or absent: the producer's partitioner (key hash)
    headers  array<struct<key string, value binary>>, optional

Each Spark task writes its rows with one :class:`headwater.client.AsyncProducer` on the
worker's loop (:mod:`headwater_spark.worker_loop`; ``acks`` option, default all): every Arrow
batch Spark hands over is split by (topic, partition) and sent with ``send_many``; the task
returns only after every record is acknowledged, and fails on the first error. Guarantee:
**at-least-once**. A task retried by Spark, or a micro-batch re-run after a failure, sends its
rows again (duplicates in the topic). ``writeStream`` with ``exactlyOnce=true`` uses
:mod:`headwater_spark.sink_txn` instead (transactions decided per micro-batch, docs/spark.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from headwater.client import AsyncProducer
from headwater.errors import InvalidConfigError, InvalidRequestError
from headwater_spark.options import SinkOptions, parse_sink_options
from headwater_spark.worker_loop import run as _run

log = logging.getLogger(__name__)

Group = tuple[str, int | None]


@dataclass
class WrittenMessage(WriterCommitMessage):
    records: int


def validate_schema(schema: StructType, opts: SinkOptions) -> None:
    """Raise InvalidConfigError unless the DataFrame can be written (see module docstring)."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise InvalidConfigError("the DataFrame written to headwater needs a value column")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], BinaryType | StringType):
            raise InvalidConfigError(f"column {name} must be binary or string")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise InvalidConfigError("column topic must be a string")
    if "topic" not in fields and not opts.topic:
        raise InvalidConfigError("no topic: give the topic option or a topic column")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise InvalidConfigError("column partition must be an int")
    if "headers" in fields and not _headers_type(fields["headers"]):
        raise InvalidConfigError("column headers must be array<struct<key string, value binary>>")


def _headers_type(h: DataType) -> bool:
    if not isinstance(h, ArrayType) or not isinstance(h.elementType, StructType):
        return False
    sub = {f.name: f.dataType for f in h.elementType.fields}
    return isinstance(sub.get("key"), StringType) and isinstance(sub.get("value"), BinaryType)


def _binary_list(rb: pa.RecordBatch, name: str) -> list[bytes | None] | None:
    if name not in rb.schema.names:
        return None
    col = rb.column(name)
    if not pa.types.is_binary(col.type):
        col = col.cast(pa.binary())
    return col.to_pylist()


def _groups(rb: pa.RecordBatch, default_topic: str | None) -> dict[Group, list[int]] | None:
    """Row indexes per (topic, partition); None when the whole batch is one group."""
    names = rb.schema.names
    if "topic" not in names and "partition" not in names:
        return None
    n = rb.num_rows
    topics = rb.column("topic").to_pylist() if "topic" in names else [default_topic] * n
    parts = rb.column("partition").to_pylist() if "partition" in names else [None] * n
    out: dict[Group, list[int]] = {}
    for i, (t, p) in enumerate(zip(topics, parts, strict=True)):
        topic = t if t is not None else default_topic
        if topic is None:
            raise InvalidRequestError(f"row {i} has a null topic and no topic option is set")
        out.setdefault((topic, p), []).append(i)
    return out


async def _send_batch(producer: AsyncProducer, rb: pa.RecordBatch, opts: SinkOptions) -> list[Any]:
    groups = _groups(rb, opts.topic)
    if groups is None:
        assert opts.topic is not None
        parts: list[tuple[Group, pa.RecordBatch]] = [((opts.topic, None), rb)]
    else:
        parts = [(g, rb.take(pa.array(idx, pa.int32()))) for g, idx in groups.items()]
    futures = []
    for (topic, partition), part in parts:
        values = _binary_list(part, "value")
        assert values is not None
        headers = None
        if "headers" in part.schema.names:
            headers = [
                [(h["key"], h["value"]) for h in (hs or ())]
                for hs in part.column("headers").to_pylist()
            ]
        futures.append(
            await producer.send_many(
                topic, values, _binary_list(part, "key"), partition=partition, headers=headers
            )
        )
    return futures


async def _start(opts: SinkOptions) -> AsyncProducer:
    producer = AsyncProducer(
        opts.bootstrap,
        acks=opts.acks,
        linger_ms=opts.linger_ms,
        security=opts.security.client_security(),
    )
    await producer.start()
    return producer


async def _finish(producer: AsyncProducer, futures: list[Any]) -> None:
    try:
        await producer.flush()
        for f in futures:
            await f
    finally:
        await producer.close()


def write_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WrittenMessage:
    """Send every row and wait for every acknowledgement (raises the first failure)."""
    producer = _run(_start(opts))
    count = 0
    futures: list[Any] = []
    try:
        for rb in batches:
            count += rb.num_rows
            futures.extend(_run(_send_batch(producer, rb, opts)))
    finally:
        _run(_finish(producer, futures))
    return WrittenMessage(count)


class HeadwaterWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.opts = parse_sink_options(options)
        if self.opts.exactly_once:
            raise InvalidConfigError(
                "exactlyOnce is for writeStream only (a batch write is one job: it either "
                "fails and is re-run, or succeeds)"
            )
        validate_schema(schema, self.opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, WrittenMessage))
        log.info("headwater sink: %d records acknowledged", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("headwater sink: job aborted; acknowledged records stay in the topic")


class HeadwaterStreamWriter(DataSourceStreamArrowWriter):
    """At-least-once: a micro-batch re-run after a failure writes its rows again."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.opts = parse_sink_options(options)
        validate_schema(schema, self.opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, WrittenMessage))
        log.info("headwater sink: micro-batch %d, %d records acknowledged", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("headwater sink: micro-batch %d aborted; acknowledged records stay", batchId)
