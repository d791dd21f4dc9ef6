"""The per-record loops of encoding a batch in C (:mod:`headwater.batch._cencode`, built by
``make install``) against the ``crc32c`` package and the Python paths they replace: the CRC
with the crc32 instruction and with the tables, value offsets, timestamp deltas, and whole
batches encoded with and without the module, byte for byte."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import crc32c
import numpy as np
import pytest

from headwater.batch import _cencode, codec, columns, decode_batches, encode_batch_pieces
from headwater.batch.encode_loops import _crc32c_extend_py
from tests.helpers.without_c import run_without_c

RNG = random.Random(20261127)


#: the checksum implementations this CPU has: the tables always, the instruction with SSE4.2
CRC_IMPLS = ["tables"] + (["hardware"] if _cencode.use_hardware(True) else [])


@pytest.fixture(params=CRC_IMPLS)
def crc_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    want = request.param == "hardware"
    _cencode.use_hardware(want)
    assert _cencode.hardware() is want
    yield request.param
    _cencode.use_hardware(True)


def _random_piece(max_len: int) -> Any:
    data = RNG.randbytes(RNG.randrange(max_len))
    kind = RNG.random()
    if kind < 0.15:
        return bytearray(data)
    if kind < 0.3 and data:  # an unaligned view into a larger buffer
        return memoryview(b"x" + data)[1:]
    return data


def test_crc32c_extend_equals_the_package_piece_by_piece(crc_impl: str) -> None:
    for _ in range(400):
        pieces = [_random_piece(70) for _ in range(RNG.randrange(12))]
        start = RNG.randrange(2**32)
        want = start
        for p in pieces:
            want = crc32c.crc32c(p, want)
        assert _cencode.crc32c_extend(start, pieces) == want
        assert _cencode.crc32c_extend(start, tuple(pieces)) == want
    assert _cencode.crc32c_extend(0, [b"hello world"]) == crc32c.crc32c(b"hello world")
    assert _cencode.crc32c_extend(1234, []) == 1234


@pytest.mark.parametrize("length", [767, 768, 769, 1024, 3 * 8192 - 1, 3 * 8192, 100_003])
def test_crc32c_extend_across_the_interleaved_blocks(crc_impl: str, length: int) -> None:
    # the instruction runs three streams over 3 x 256 and 3 x 8192 byte blocks: every length
    # around them, at every alignment, from any starting value
    data = RNG.randbytes(length + 8)
    for start_at in range(8):
        piece = memoryview(data)[start_at : start_at + length]
        for crc in (0, 0xFFFFFFFF, RNG.randrange(2**32)):
            assert _cencode.crc32c_extend(crc, [piece]) == crc32c.crc32c(piece, crc)


def test_crc32c_extend_large_pieces_release_the_gil(crc_impl: str) -> None:
    # 1 KiB values of a 4 MiB batch (over 64 KiB: computed with the GIL released); another
    # thread runs meanwhile and the result is still the package's
    pieces = [RNG.randbytes(1024) for _ in range(4096)]
    want = crc32c.crc32c(b"".join(pieces), 7)
    ticks = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        for _ in range(20):
            assert _cencode.crc32c_extend(7, pieces) == want
    finally:
        stop.set()
        t.join()
    assert ticks > 0


def test_crc32c_extend_refuses_what_is_not_bytes_like() -> None:
    with pytest.raises(TypeError, match="bytes-like, got str at index 1"):
        _cencode.crc32c_extend(0, [b"a", "b"])
    with pytest.raises(TypeError, match="bytes-like, got NoneType at index 0"):
        _cencode.crc32c_extend(0, [None])
    with pytest.raises(TypeError, match="list or a tuple"):
        _cencode.crc32c_extend(0, iter([b"a"]))
    with pytest.raises(ValueError, match="32-bit"):
        _cencode.crc32c_extend(2**32, [b"a"])
    with pytest.raises(OverflowError):
        _cencode.crc32c_extend(-1, [b"a"])


def test_value_offsets_of_a_list_of_bytes() -> None:
    for _ in range(200):
        items = [RNG.randbytes(RNG.randrange(40)) for _ in range(RNG.randrange(30))]
        want = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum([len(v) for v in items], out=want[1:])
        got = _cencode.value_offsets(items)
        assert got is not None
        assert np.frombuffer(got, dtype="<i4").tolist() == want.tolist()


@pytest.mark.parametrize(
    "items",
    [[b"a", None], [b"a", bytearray(b"b")], (b"a", b"b"), [b"a", "b"], [memoryview(b"a")]],
    ids=["null", "bytearray", "tuple", "str", "memoryview"],
)
def test_value_offsets_leaves_everything_else_to_the_general_path(items: Any) -> None:
    assert _cencode.value_offsets(items) is None


def test_int32_deltas() -> None:
    first = 1_764_000_000_000
    values = [first + RNG.randrange(-1000, 100_000) for _ in range(500)]
    got = _cencode.int32_deltas(values, first)
    assert got is not None
    assert np.frombuffer(got, dtype="<i4").tolist() == [v - first for v in values]
    assert _cencode.int32_deltas([], first) == b""
    edge = [first + 2**31 - 1, first - 2**31]
    assert np.frombuffer(_cencode.int32_deltas(edge, first) or b"", "<i4").tolist() == [
        2**31 - 1,
        -(2**31),
    ]


@pytest.mark.parametrize(
    ("values", "first"),
    [
        ([0, 2**31], 0),  # a difference past int32
        ([0, -(2**31) - 1], 0),
        ([0, 1.0], 0),  # not an int
        ([0, True], 0),  # bool is not an exact int
        ((0, 1), 0),  # not a list
        ([0, 1], 0.5),  # first not an int
        ([2**70], 0),  # past int64
        ([0], 2**70),
    ],
)
def test_int32_deltas_leaves_everything_else_to_the_general_path(values: Any, first: Any) -> None:
    assert _cencode.int32_deltas(values, first) is None


def _batches(seed: int) -> Iterator[dict[str, Any]]:
    """Producer-shaped batches: per-record timestamps, large and small values, nulls, keys."""
    rng = random.Random(seed)
    now = 1_764_000_000_000
    for i in range(60):
        n = rng.randrange(1, 300)
        size = rng.choice([0, 10, 100, 1024, 3000])
        values: list[Any] = [rng.randbytes(rng.randrange(size + 1)) for _ in range(n)]
        if i % 5 == 1:
            values[rng.randrange(n)] = None
        keys = None if i % 3 else [rng.randbytes(8) if rng.random() < 0.7 else None for _ in values]
        ts: Any = [now + rng.randrange(0, 5000) for _ in range(n)] if i % 4 else now
        yield {
            "values": values,
            "keys": keys,
            "timestamps": ts,
            "producer_id": 77,
            "producer_epoch": 3,
            "base_sequence": i * 1000,
            "values_as_pieces": bool(i % 2),
        }


def test_batches_encode_byte_for_byte_as_without_the_module(
    monkeypatch: pytest.MonkeyPatch, crc_impl: str
) -> None:
    with_c = [b"".join(encode_batch_pieces(**b)) for b in _batches(1)]
    monkeypatch.setattr(codec, "crc32c_extend", _crc32c_extend_py)
    monkeypatch.setattr(codec, "int32_deltas", lambda values, first: None)
    monkeypatch.setattr(columns, "value_offsets", lambda items: None)
    without = [b"".join(encode_batch_pieces(**b)) for b in _batches(1)]
    assert with_c == without
    for raw, b in zip(with_c, _batches(1), strict=True):
        [batch] = decode_batches(raw)  # the CRC checks out
        assert batch.values() == b["values"]
        ts = b["timestamps"]
        want_ts = ts if isinstance(ts, list) else [ts] * len(b["values"])
        assert batch.timestamps().tolist() == want_ts


_WITHOUT_C = """
from headwater.batch import decode_batches, encode_batch_pieces, encode_loops

assert encode_loops._cencode is None
assert encode_loops.value_offsets([b"a"]) is None
assert encode_loops.int32_deltas([1], 1) is None
raw = b"".join(encode_batch_pieces([b"x" * 1000, b"y"], timestamps=[5, 6], values_as_pieces=True))
[batch] = decode_batches(raw)
assert batch.values() == [b"x" * 1000, b"y"]
print("ok")
"""


def test_without_the_c_module_the_python_paths_are_used() -> None:
    assert run_without_c(["headwater.batch._cencode"], _WITHOUT_C).strip() == "ok"
