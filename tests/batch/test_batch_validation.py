"""validate_batches / decode_batches reject malformed input with typed errors."""

from __future__ import annotations

import struct

import crc32c
import pytest

from headwater.batch import HEADER_SIZE, decode_batches, encode_batch, validate_batches
from headwater.batch.layout import ATTR_KNOWN, CRC_START, HEADER
from headwater.errors import (
    CorruptRecordError,
    HeadwaterError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)

pytestmark = pytest.mark.fast

MAX = 1 << 24

# field indices in layout.HEADER
F_BASE, F_LEN, F_EPOCH, F_MAGIC, F_VERSION, F_CRC, F_ATTRS = range(7)
F_LAST_DELTA, F_FIRST_TS, F_MAX_TS, F_PID, F_SEQ, F_COUNT = 8, 9, 10, 11, 12, 13


def _valid(codec: str = "none", n: int = 5) -> bytes:
    return encode_batch(
        [b"value-%d" % i for i in range(n)],
        [b"k%d" % i if i % 2 else None for i in range(n)],
        headers=[(("h", b"x"),)] * n,
        timestamps=1_000,
        compression_type=codec,
    )


def _with_field(raw: bytes, index: int, value: object, *, fix_crc: bool = True) -> bytes:
    buf = bytearray(raw)
    fields = list(HEADER.unpack_from(buf, 0))
    fields[index] = value
    HEADER.pack_into(buf, 0, *fields)
    if fix_crc:
        _recrc(buf)
    return bytes(buf)


def _recrc(buf: bytearray, pos: int = 0) -> None:
    total = 12 + struct.unpack_from("<i", buf, pos + 8)[0]
    struct.pack_into("<I", buf, pos + 20, crc32c.crc32c(bytes(buf[pos + CRC_START : pos + total])))


def _rejects(buf: bytes, exc: type[HeadwaterError] = CorruptRecordError) -> None:
    with pytest.raises(exc):
        validate_batches(buf, max_batch_bytes=MAX)
    with pytest.raises(exc):
        decode_batches(buf)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd"])
def test_accepts_what_encode_produces(codec: str) -> None:
    raw = _valid(codec)
    [(pos, h)] = validate_batches(raw, max_batch_bytes=MAX)
    assert (pos, h.record_count, h.total_size) == (0, 5, len(raw))
    assert decode_batches(raw)[0].values() == [b"value-%d" % i for i in range(5)]


def test_empty_buffer() -> None:
    with pytest.raises(CorruptRecordError):
        validate_batches(b"", max_batch_bytes=MAX)
    assert decode_batches(b"") == []  # a fetch response may carry no batch


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_truncated_buffers(codec: str) -> None:
    raw = _valid(codec)
    for cut in [1, 8, 12, 63, HEADER_SIZE, HEADER_SIZE + 1, len(raw) - 8, len(raw) - 1]:
        _rejects(raw[:cut])
    # a whole batch followed by a torn second one
    _rejects(raw + raw[: len(raw) // 2])


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd"])
def test_every_flipped_byte_under_the_crc_is_caught(codec: str) -> None:
    raw = _valid(codec)
    for i in range(CRC_START, len(raw)):
        buf = bytearray(raw)
        buf[i] ^= 0x01
        with pytest.raises(HeadwaterError):
            validate_batches(bytes(buf), max_batch_bytes=MAX)
        with pytest.raises(HeadwaterError):
            decode_batches(bytes(buf))


def test_flipped_crc_field() -> None:
    buf = bytearray(_valid())
    buf[21] ^= 0x80
    _rejects(bytes(buf))


def test_unknown_magic_and_version() -> None:
    raw = _valid()
    _rejects(_with_field(raw, F_MAGIC, b"KFK"))
    _rejects(_with_field(raw, F_VERSION, 2))
    _rejects(_with_field(raw, F_VERSION, 0))


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 51, 52 + 4])
def test_negative_or_short_batch_length(length: int) -> None:
    _rejects(_with_field(_valid(), F_LEN, length, fix_crc=False))


def test_batch_length_past_the_buffer() -> None:
    raw = _valid()
    _rejects(_with_field(raw, F_LEN, len(raw) - 12 + 8, fix_crc=False))


def test_record_count_mismatch_with_last_offset_delta() -> None:
    raw = _valid()
    _rejects(_with_field(raw, F_COUNT, 4))  # dense batch: count must be last_delta + 1
    _rejects(_with_field(raw, F_COUNT, 6))
    _rejects(_with_field(raw, F_COUNT, 0))
    _rejects(_with_field(raw, F_COUNT, -3))
    _rejects(_with_field(raw, F_LAST_DELTA, 3))
    _rejects(_with_field(raw, F_LAST_DELTA, -1))


def test_record_count_disagreeing_with_the_section_is_caught_on_decode() -> None:
    # a sparse batch may legally have last_offset_delta > count - 1; a wrong count is then
    # only visible in the section, which the decoder checks
    raw = encode_batch([b"a", b"b", b"c"], timestamps=1, offset_deltas=[0, 5, 9])
    bad = _with_field(raw, F_COUNT, 2)
    validate_batches(bad, max_batch_bytes=MAX)  # header-only validation cannot tell
    [b] = decode_batches(bad)
    with pytest.raises(CorruptRecordError):
        b.values()


def test_unknown_attribute_bits() -> None:
    raw = _valid()
    attrs = struct.unpack_from("<h", raw, 24)[0]
    for bit in [0x200, 0x400, 0x4000, -0x8000]:
        _rejects(_with_field(raw, F_ATTRS, attrs | bit))
    assert ATTR_KNOWN == 0x1FF


def test_unknown_codec_id() -> None:
    raw = _valid()
    attrs = struct.unpack_from("<h", raw, 24)[0]
    for codec_id in [4, 5, 7]:
        _rejects(
            _with_field(raw, F_ATTRS, (attrs & ~7) | codec_id), UnsupportedCompressionTypeError
        )


def test_max_timestamp_before_first_timestamp() -> None:
    _rejects(_with_field(_valid(), F_MAX_TS, 999))


def test_size_over_max_is_message_too_large() -> None:
    raw = _valid()
    with pytest.raises(MessageTooLargeError):
        validate_batches(raw, max_batch_bytes=len(raw) - 1)
    assert validate_batches(raw, max_batch_bytes=len(raw))
    with pytest.raises(MessageTooLargeError):
        validate_batches(raw + _valid(n=50), max_batch_bytes=len(raw))


def test_produced_batch_must_have_base_offset_zero() -> None:
    _rejects_validate = _with_field(_valid(), F_BASE, 42)  # base offset lies outside the CRC
    with pytest.raises(CorruptRecordError):
        validate_batches(_rejects_validate, max_batch_bytes=MAX)


def test_compression_bomb_is_refused_before_inflating() -> None:
    raw = encode_batch([b"\0" * (4 << 20)], timestamps=0, compression_type="zstd")
    [b] = decode_batches(raw, max_uncompressed=1 << 20)
    with pytest.raises(CorruptRecordError):
        b.values()
