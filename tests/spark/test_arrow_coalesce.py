"""headwater_spark.arrow.coalesce: what a read task yields to Spark per poll.

Large Arrow batches must cross unchanged (the same object, the same value buffer: no copy),
runs of small ones are concatenated up to the threshold, and every row comes out once, in
order. No Spark needed: this is the reader's last step before Spark's Arrow serializer.
"""

from __future__ import annotations

import pyarrow as pa
from headwater_spark import arrow


def _batch(first: int, n: int, size: int) -> pa.RecordBatch:
    """``n`` rows with offsets ``first..first+n-1`` and ``size``-byte values."""
    values = [i.to_bytes(4, "big") * (size // 4) for i in range(first, first + n)]
    return pa.RecordBatch.from_arrays(
        [pa.array(range(first, first + n), pa.int64()), pa.array(values, pa.binary())],
        names=["offset", "value"],
    )


def _rows(batches: list[pa.RecordBatch]) -> list[dict[str, object]]:
    return pa.Table.from_batches(batches).to_pylist()


def test_large_batches_cross_as_they_are() -> None:
    big = [_batch(0, 300, 1024), _batch(300, 300, 1024)]  # ~300 KiB each
    assert all(b.nbytes >= arrow.MIN_BATCH_BYTES for b in big)
    out = list(arrow.coalesce(big))
    assert len(out) == 2
    for got, want in zip(out, big, strict=True):
        assert got is want
        assert got.column(1).buffers()[2].address == want.column(1).buffers()[2].address


def test_small_batches_are_concatenated_up_to_the_threshold() -> None:
    small = [_batch(i * 10, 10, 100) for i in range(10)]  # ~1 KiB each
    out = list(arrow.coalesce(small, min_bytes=3 * small[0].nbytes))
    assert [b.num_rows for b in out] == [30, 30, 30, 10]
    assert _rows(out) == _rows(small)


def test_a_large_batch_is_not_copied_into_a_run_of_small_ones() -> None:
    parts = [_batch(0, 5, 100), _batch(5, 5, 100), _batch(10, 300, 1024), _batch(310, 5, 100)]
    out = list(arrow.coalesce(parts))
    assert [b.num_rows for b in out] == [10, 300, 5]
    assert out[1] is parts[2]
    assert _rows(out) == _rows(parts)
    assert [r["offset"] for r in _rows(out)] == list(range(315))


def test_nothing_in_nothing_out() -> None:
    assert list(arrow.coalesce([])) == []
