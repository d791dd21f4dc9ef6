"""Bounded fuzzing of the decoder: any input either decodes or raises a HeadwaterError.

Inputs are random bytes and mutations of valid batches (byte flips, truncations, extensions,
overwritten header fields), each also with the CRC recomputed, and with the *uncompressed*
records section mutated and re-compressed, so the section checks behind the CRC and the
decompressors are reached, not only the CRC check.
"""

from __future__ import annotations

import os
import struct

import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.batch import HEADER_SIZE, Compression, decode_batches, encode_batch
from headwater.batch import compression as comp
from headwater.batch.layout import CRC_START, HEADER
from headwater.errors import HeadwaterError

#: CI runs 300 examples per test; set HEADWATER_FUZZ_EXAMPLES for a longer campaign.
FUZZ = settings(
    max_examples=int(os.environ.get("HEADWATER_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_LIMIT = 1 << 20  # max_uncompressed for fuzzed decodes: keeps hostile inflation cheap


def _exercise(buf: bytes) -> None:
    """Everything a consumer may call on a fetched buffer."""
    try:
        for b in decode_batches(buf, max_uncompressed=_LIMIT):
            _ = b.columns
            b.values()
            b.keys()
            b.headers()
            b.timestamps()
            b.offsets()
            b.records()
            b.to_arrow().validate(full=True)
    except HeadwaterError:
        pass


def _recrc(buf: bytearray) -> None:
    """Recompute the CRC of every batch whose declared extent lies inside ``buf``."""
    pos = 0
    while pos + HEADER_SIZE <= len(buf):
        length = struct.unpack_from("<i", buf, pos + 8)[0]
        total = 12 + length
        if length < 52 or pos + total > len(buf) or total % 8:
            return
        struct.pack_into(
            "<I", buf, pos + 20, crc32c.crc32c(bytes(buf[pos + CRC_START : pos + total]))
        )
        pos += total


maybe = st.none() | st.binary(max_size=20)


@st.composite
def valid_batch(draw: st.DrawFn) -> bytes:
    n = draw(st.integers(1, 12))
    values = draw(st.lists(maybe, min_size=n, max_size=n))
    keys = draw(st.none() | st.lists(maybe, min_size=n, max_size=n))
    headers = draw(
        st.none()
        | st.lists(
            st.lists(st.tuples(st.text(max_size=4), maybe), max_size=2), min_size=n, max_size=n
        )
    )
    od = None
    if draw(st.booleans()):
        od = [2 * i + 1 for i in range(n)]
    ts = draw(st.lists(st.integers(0, 10_000), min_size=n, max_size=n))
    codec = draw(st.sampled_from(list(Compression)))
    return encode_batch(
        values, keys, headers=headers, timestamps=ts, compression_type=codec, offset_deltas=od
    )


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes(data: bytes) -> None:
    _exercise(data)


@FUZZ
@given(st.binary(min_size=HEADER_SIZE - 24, max_size=400), valid_batch())
def test_random_bytes_behind_a_plausible_header(tail: bytes, template: bytes) -> None:
    """A real header prefix (magic, version) with random bytes after it, CRC made valid."""
    buf = bytearray(template[:24] + tail)
    buf += b"\0" * (-len(buf) % 8)
    struct.pack_into("<i", buf, 8, len(buf) - 12)
    _recrc(buf)
    _exercise(bytes(buf))


mutation = st.tuples(
    st.sampled_from(["flip", "set", "truncate", "extend", "field"]),
    st.integers(0, 1 << 16),
    st.integers(0, 255),
)


def _mutate(raw: bytes, ops: list[tuple[str, int, int]], fix_crc: bool) -> bytes:
    buf = bytearray(raw)
    for kind, where, val in ops:
        if not buf:
            break
        i = where % len(buf)
        if kind == "flip":
            buf[i] ^= 1 << (val % 8)
        elif kind == "set":
            buf[i] = val
        elif kind == "truncate":
            del buf[i:]
        elif kind == "extend":
            buf += bytes([val]) * (1 + where % 64)
        elif len(buf) >= HEADER_SIZE:  # overwrite one header field with an edge value
            fields = list(HEADER.unpack_from(buf, 0))
            idx = where % len(fields)
            if idx == 3:
                continue
            edges = [0, 1, -1, 2**31 - 1, -(2**31), 7, 8, 52, 64, 1 << 20]
            fields[idx] = edges[val % len(edges)]
            if idx in (4, 1 + 5 - 1) and fields[idx] < 0:  # u8 version / u32 crc
                fields[idx] = 0
            if idx == 6:  # int16 attributes
                fields[idx] = (val * 37) % 0x10000 - 0x8000
            if idx == 7:  # int16 producer epoch
                fields[idx] = -1
            try:
                HEADER.pack_into(buf, 0, *fields)
            except struct.error:
                continue
    if fix_crc:
        _recrc(buf)
    return bytes(buf)


@FUZZ
@given(st.lists(valid_batch(), min_size=1, max_size=3), st.lists(mutation, min_size=1, max_size=4))
def test_mutated_batches(batches: list[bytes], ops: list[tuple[str, int, int]]) -> None:
    raw = b"".join(batches)
    _exercise(_mutate(raw, ops, fix_crc=False))
    _exercise(_mutate(raw, ops, fix_crc=True))


@FUZZ
@given(
    valid_batch(), st.lists(mutation, min_size=1, max_size=4), st.sampled_from(list(Compression))
)
def test_mutated_sections_recompressed(
    raw: bytes, ops: list[tuple[str, int, int]], codec: Compression
) -> None:
    """Mutate the uncompressed records section, then frame it again under a valid CRC."""
    [b] = decode_batches(raw)
    h = b.header
    plain = bytes(memoryview(raw)[HEADER_SIZE:])
    if h.compression != Compression.NONE:
        plain = comp.decompress(h.compression, plain, 1 << 30)
    section = bytearray(_mutate(plain, ops, fix_crc=False))
    section += b"\0" * (-len(section) % 8)
    body = (
        bytes(section)
        if codec == Compression.NONE
        else b"".join(comp.compress(codec, bytes(section)))
    )
    fields = list(HEADER.unpack_from(raw, 0))
    fields[1] = HEADER_SIZE + len(body) - 12
    fields[6] = (h.attributes & ~7) | int(codec)
    buf = bytearray(HEADER.pack(*fields)) + body
    _recrc(buf)
    _exercise(bytes(buf))


@FUZZ
@given(valid_batch(), st.integers(0, 1 << 31), st.integers(0, 1 << 31))
def test_lying_compression_frame(raw: bytes, raw_len: int, comp_len: int) -> None:
    """Overwrite the compression frame's declared lengths (CRC fixed)."""
    buf = bytearray(raw)
    if buf[24] & 7 == 0:
        return
    struct.pack_into("<II", buf, HEADER_SIZE, raw_len % (1 << 32), comp_len % (1 << 32))
    _recrc(buf)
    _exercise(bytes(buf))
