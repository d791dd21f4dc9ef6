"""headwater_spark.arrow.spark_batches: the fetched batch slices of a poll become Spark-schema
Arrow batches holding exactly their records (checked against the per-record path,
``FetchedBatch.records()``), for every shape a fetch can hand out: many small batches, slices
of batches, keys and values with nulls, batches with and without keys or headers, compacted
batches (offset gaps), log-append-time batches, more than one partition, and output split
before a column passes the int32 offset limit. Pure: no Spark session, no cluster."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from headwater_spark import arrow

from headwater.batch import RecordBatch, TimestampType, encode_batch, set_log_append_time
from headwater.client.fetched import FetchedBatch
from headwater.client.types import TopicPartition

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
TP = TopicPartition("events", 3)


def fetched(
    tp: TopicPartition,
    base: int,
    values: list[bytes | None],
    *,
    keys: list[bytes | None] | None = None,
    headers: list[list[tuple[str, bytes | None]]] | None = None,
    offset_deltas: list[int] | None = None,
    log_append_ms: int | None = None,
    start: int = 0,
    stop: int | None = None,
) -> FetchedBatch:
    raw = encode_batch(
        values,
        keys,
        headers=headers,
        timestamps=[1_700_000_000_000 + base + i for i in range(len(values))],
        base_offset=base,
        offset_deltas=offset_deltas,
    )
    if log_append_ms is not None:
        buf = bytearray(raw)
        set_log_append_time(buf, log_append_ms)
        raw = bytes(buf)
    batch = RecordBatch(raw)
    return FetchedBatch(tp, batch, start, len(values) if stop is None else stop)


def expected_rows(pieces: list[FetchedBatch], include_headers: bool) -> list[dict[str, Any]]:
    """The per-record path's rows in Spark's column names."""
    rows = []
    for fb in pieces:
        ttype = int(fb.batch.header.timestamp_type)
        for r in fb.records():
            row: dict[str, Any] = {
                "key": r.key,
                "value": r.value,
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": EPOCH + dt.timedelta(milliseconds=r.timestamp),
                "timestampType": ttype,
            }
            if include_headers:
                row["headers"] = [{"key": k, "value": v} for k, v in r.headers]
            rows.append(row)
    return rows


def mixed_pieces() -> list[FetchedBatch]:
    return [
        fetched(TP, 0, [b"a", b"bb", b"ccc"]),  # no keys, no headers
        fetched(
            TP,
            3,
            [b"d", None, b"ff"],
            keys=[b"k3", None, b"k5"],
            headers=[[("h", b"1"), ("g", None)], [], [("h", b"3")]],
        ),
        fetched(TP, 6, [b"x" * 100] * 4, keys=[b"k"] * 4, start=1, stop=3),  # a slice
        fetched(TP, 10, [b"p", b"q", b"r"], offset_deltas=[0, 4, 9]),  # compacted: gaps
        fetched(TP, 20, [b"", b"s"], log_append_ms=1_800_000_000_000),
        fetched(TP, 22, [b"t", None, b"u", b"v"], headers=[[("z", b"")]] * 4, start=2),
    ]


@pytest.mark.parametrize("include_headers", [False, True])
def test_rows_match_the_per_record_path(include_headers: bool) -> None:
    pieces = mixed_pieces()
    [batch] = list(arrow.spark_batches(pieces, include_headers))
    batch.validate(full=True)
    assert batch.to_pylist() == expected_rows(pieces, include_headers)
    assert batch.schema.names == arrow.NAMES + (["headers"] if include_headers else [])
    assert batch.schema.field("timestamp").type == arrow.TIMESTAMP
    assert batch.schema.field("partition").type == pa.int32()
    assert batch.schema.field("timestampType").type == pa.int32()
    if include_headers:
        assert batch.schema.field("headers").type == arrow.HEADERS
    assert [r["timestampType"] for r in batch.to_pylist()][-4:-2] == [
        int(TimestampType.LOG_APPEND_TIME)
    ] * 2


def test_many_small_batches_become_one() -> None:
    pieces = [fetched(TP, 3 * i, [b"v%d" % (3 * i + j) for j in range(3)]) for i in range(300)]
    batches = list(arrow.spark_batches(pieces, False))
    assert len(batches) == 1
    assert batches[0].column("offset").to_pylist() == list(range(900))
    assert batches[0].column("value").to_pylist() == [b"v%d" % i for i in range(900)]


def test_only_null_keys_and_values() -> None:
    pieces = [fetched(TP, 0, [None, None]), fetched(TP, 2, [None], keys=[None])]
    [batch] = list(arrow.spark_batches(pieces, True))
    batch.validate(full=True)
    assert batch.to_pylist() == expected_rows(pieces, True)
    assert batch.column("key").null_count == 3 and batch.column("value").null_count == 3


def test_pieces_of_several_partitions_and_topics() -> None:
    pieces = [
        fetched(TopicPartition("a", 0), 0, [b"1", b"2"]),
        fetched(TopicPartition("a", 5), 7, [b"3"], keys=[b"k"]),
        fetched(TopicPartition("bb", 1), 9, [b"4", b"5"], headers=[[("x", b"y")], []]),
    ]
    [batch] = list(arrow.spark_batches(pieces, True))
    batch.validate(full=True)
    assert batch.to_pylist() == expected_rows(pieces, True)


def test_output_is_split_before_a_column_passes_the_offset_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(arrow, "INT32_MAX", 450)  # stand-in for 2 GiB: 200 B a piece
    pieces = [fetched(TP, 2 * i, [b"%03d" % i + b"x" * 97] * 2) for i in range(5)]
    batches = list(arrow.spark_batches(pieces, False))
    assert [b.num_rows for b in batches] == [4, 4, 2]
    assert all(sum(len(v) for v in b.column("value").to_pylist()) <= 450 for b in batches)
    rows = [r for b in batches for r in b.to_pylist()]
    assert rows == expected_rows(pieces, False)


def test_no_pieces_no_batches() -> None:
    assert list(arrow.spark_batches([], True)) == []
