"""The per-record loops of turning a decoded batch into Python objects in C
(:mod:`headwater.batch._cdecode`, built by ``make install``) against the Python paths they
replace (pyarrow's ``to_pylist``, ``tuple.__new__`` over ``zip``): same values, nulls and
slices; offsets that leave the data are refused rather than read."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from headwater.batch import _cdecode, decode_batches, encode_batch
from headwater.batch.decode_loops import _binary_list_py, _rows_py
from headwater.client.fetched import FetchedBatch, records_of
from headwater.client.types import ConsumerRecord, TopicPartition
from tests.helpers.without_c import run_without_c

RNG = random.Random(20261202)


def _column(items: list[bytes | None]) -> tuple[bytes | None, np.ndarray, bytes]:
    """(validity bitmap or None, int32 offsets, data) of ``items``, Arrow's layout."""
    offsets = np.zeros(len(items) + 1, dtype="<i4")
    np.cumsum([len(v or b"") for v in items], out=offsets[1:])
    bits = bytearray((len(items) + 7) // 8)
    for i, v in enumerate(items):
        if v is not None:
            bits[i >> 3] |= 1 << (i & 7)
    validity = None if all(v is not None for v in items) else bytes(bits)
    return validity, offsets, b"".join(v or b"" for v in items)


def _random_items() -> list[bytes | None]:
    size = RNG.choice([0, 3, 100, 1024])
    return [
        None if RNG.random() < 0.1 else RNG.randbytes(RNG.randrange(size + 1))
        for _ in range(RNG.randrange(40))
    ]


def test_binary_list_equals_pyarrow_for_every_slice() -> None:
    for _ in range(300):
        items = _random_items()
        validity, offsets, data = _column(items)
        start = RNG.randrange(len(items) + 1)
        stop = RNG.randrange(start, len(items) + 1)
        got = _cdecode.binary_list(validity, offsets, memoryview(data), start, stop)
        assert got == items[start:stop]
        assert got == _binary_list_py(validity, offsets, data, start, stop)
        assert all(type(v) is bytes for v in got if v is not None)


def test_binary_list_reads_views_into_a_larger_buffer() -> None:
    """The decoder hands out unaligned memoryview slices of the received message."""
    items: list[bytes | None] = [b"ab", None, b"", b"xyz"]
    validity, offsets, data = _column(items)
    assert validity is not None
    big = b"#" + validity + b"#" + offsets.tobytes() + b"#" + data + b"#"
    view = memoryview(big)
    v0 = 1
    o0 = v0 + len(validity) + 1
    d0 = o0 + offsets.nbytes + 1
    got = _cdecode.binary_list(
        view[v0 : v0 + len(validity)],
        np.frombuffer(view[o0 : o0 + offsets.nbytes], dtype="<i4"),
        view[d0 : d0 + len(data)],
        0,
        4,
    )
    assert got == items


@pytest.mark.parametrize(
    ("offsets", "data", "start", "stop", "match"),
    [
        ([0, 2, 9], b"abcd", 0, 2, "outside"),  # past the data
        ([0, 3, 1], b"abcd", 0, 2, "outside"),  # decreasing
        ([-1, 2], b"abcd", 0, 1, "outside"),  # negative
        ([0, 2], b"abcd", 0, 2, "offsets for entries"),  # one offset short
        ([0, 2], b"abcd", 1, 0, "start <= stop"),
        ([0, 2], b"abcd", -1, 1, "start <= stop"),
    ],
)
def test_binary_list_refuses_offsets_outside_the_data(
    offsets: list[int], data: bytes, start: int, stop: int, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        _cdecode.binary_list(None, np.array(offsets, dtype="<i4"), data, start, stop)


def test_binary_list_refuses_a_short_validity_bitmap() -> None:
    offsets = np.zeros(10, dtype="<i4")
    with pytest.raises(ValueError, match="validity bitmap"):
        _cdecode.binary_list(b"\xff", offsets, b"", 0, 9)
    with pytest.raises(TypeError):
        _cdecode.binary_list("not a buffer", offsets, b"", 0, 1)


def test_rows_equal_tuple_new_over_zip() -> None:
    for _ in range(100):
        n = RNG.randrange(30)
        columns = (
            [RNG.randrange(2**40) for _ in range(n)],
            [RNG.randrange(2**41) for _ in range(n)],
            [RNG.choice([None, b"k"]) for _ in range(n)],
            [RNG.randbytes(RNG.randrange(20)) for _ in range(n)],
            [(("h", b"v"),) if RNG.random() < 0.3 else () for _ in range(n)],
        )
        got = _cdecode.rows(ConsumerRecord, ("t", 3), columns)
        assert got == _rows_py(ConsumerRecord, ("t", 3), columns)
        assert all(type(r) is ConsumerRecord for r in got)
        assert [r.value for r in got] == columns[3]
        assert [r.partition for r in got] == [3] * n


class _WithField(tuple[Any, ...]):
    pass  # no __slots__: instances carry a __dict__


@pytest.mark.parametrize(
    ("cls", "prefix", "columns", "match"),
    [
        (list, (), ([1],), "subclass of tuple"),
        (_WithField, (), ([1],), "adds fields"),
        (ConsumerRecord, ["t"], ([1],), "must be tuples"),
        (ConsumerRecord, (), [[1]], "must be tuples"),
        (ConsumerRecord, (), ((1,),), "must be a list"),
        (ConsumerRecord, (), ([1], [1, 2]), "column 1 has 2 entries"),
    ],
)
def test_rows_refuses_what_it_cannot_build(cls: Any, prefix: Any, columns: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        _cdecode.rows(cls, prefix, columns)


def test_consumer_records_of_real_batches_equal_the_python_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FetchedBatch.records through the C loops and through the Python ones, on encoded and
    decoded batches with keys, null values and headers, sliced as poll slices them."""
    from headwater.batch import columns as columns_module
    from headwater.client import fetched

    tp = TopicPartition("t", 1)
    slices: list[FetchedBatch] = []
    for i in range(40):
        n = RNG.randrange(1, 200)
        values: list[bytes | None] = [RNG.randbytes(RNG.randrange(1500)) for _ in range(n)]
        values[RNG.randrange(n)] = None
        keys = [RNG.randbytes(4) if RNG.random() < 0.5 else None for _ in range(n)]
        headers = [[("k", b"v"), ("n", None)] if RNG.random() < 0.2 else [] for _ in range(n)]
        raw = encode_batch(values, keys if i % 2 else None, headers=headers, base_offset=100 * i)
        [batch] = decode_batches(raw)
        start = RNG.randrange(n)
        slices.append(FetchedBatch(tp, batch, start, RNG.randrange(start, n + 1)))
    with_c = records_of(slices)
    monkeypatch.setattr(fetched, "rows", _rows_py)
    monkeypatch.setattr(columns_module, "binary_list", _binary_list_py)
    without = records_of(slices)
    assert with_c == without
    assert len(with_c) == sum(len(s) for s in slices)
    assert {r.headers for r in with_c} <= {(), (("k", b"v"), ("n", None))}


_WITHOUT_C = """
from headwater.batch import decode_batches, decode_loops, encode_batch
from headwater.client.fetched import FetchedBatch, records_of
from headwater.client.types import TopicPartition

assert decode_loops._cdecode is None
[batch] = decode_batches(encode_batch([b"x" * 1000, None, b"y"], [b"k", None, None]))
assert batch.values() == [b"x" * 1000, None, b"y"]
assert batch.keys(1) == [None, None]
got = records_of([FetchedBatch(TopicPartition("t", 0), batch, 1, 3)])
want = [("t", 1, None, None), ("t", 2, None, b"y")]
assert [(r.topic, r.offset, r.key, r.value) for r in got] == want
print("ok")
"""


def test_without_the_c_module_the_python_paths_are_used() -> None:
    assert run_without_c(["headwater.batch._cdecode"], _WITHOUT_C).strip() == "ok"
