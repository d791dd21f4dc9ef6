"""Control batches (transaction markers): layout, parsing, and produce-side rejection."""

from __future__ import annotations

import struct

import pytest

from headwater.batch import (
    ControlRecord,
    encode_batch,
    encode_control_batch,
    is_control,
    is_transactional,
    parse_control_batch,
    parse_header,
    validate_batches,
)
from headwater.errors import CorruptRecordError, InvalidRequestError

pytestmark = pytest.mark.fast

LIMIT = 1 << 20


def _marker(committed: bool = True, coordinator_epoch: int = 7) -> bytes:
    return encode_control_batch(
        producer_id=42,
        producer_epoch=3,
        committed=committed,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=1_700_000_000_123,
    )


@pytest.mark.parametrize("committed", [True, False])
def test_round_trip_and_header_fields(committed: bool) -> None:
    raw = _marker(committed, 9)
    h = parse_header(raw)
    assert len(raw) == 120 == h.total_size
    assert h.attributes == 0x70
    assert is_control(h) and is_transactional(h)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (42, 3, -1, 1)
    assert h.first_timestamp == h.max_timestamp == 1_700_000_000_123
    assert parse_control_batch(raw) == ControlRecord(committed, 9)


def test_record_bytes_follow_the_spec() -> None:
    raw = _marker(False, 5)
    # key: u16 version 0, u16 type 0 (ABORT); value: u16 version 0, i32 coordinator epoch
    assert raw[64 + 24 : 64 + 28] == struct.pack("<HH", 0, 0)
    assert raw[64 + 48 : 64 + 54] == struct.pack("<Hi", 0, 5)


def test_parse_at_position_inside_a_buffer() -> None:
    data = encode_batch([b"x"]) + _marker(True, 1)
    pos = len(data) - 120
    assert parse_control_batch(data, pos) == ControlRecord(True, 1)


def test_data_batch_is_not_control() -> None:
    raw = encode_batch(
        [b"v"], [b"k"], transactional=True, producer_id=1, producer_epoch=0, base_sequence=0
    )
    h = parse_header(raw)
    assert is_transactional(h) and not is_control(h)
    with pytest.raises(CorruptRecordError):
        parse_control_batch(raw)


def test_corruption_and_unknown_types_are_rejected() -> None:
    raw = bytearray(_marker())
    raw[64 + 26] = 9  # marker type 9
    with pytest.raises(CorruptRecordError):
        parse_control_batch(bytes(raw))  # CRC mismatch first
    bad_type = encode_batch(
        [struct.pack("<Hi", 0, 1)],
        [struct.pack("<HH", 0, 9)],
        producer_id=1,
        producer_epoch=0,
        transactional=True,
        control=True,
    )
    with pytest.raises(CorruptRecordError, match="unknown control record"):
        parse_control_batch(bad_type)
    wrong_len = encode_batch(
        [b"\0\0\0\0\0\0\0\0"],
        [struct.pack("<HH", 0, 1)],
        producer_id=1,
        producer_epoch=0,
        transactional=True,
        control=True,
    )
    with pytest.raises(CorruptRecordError):
        parse_control_batch(wrong_len)
    with pytest.raises(CorruptRecordError):
        parse_control_batch(_marker()[:100])


def test_validate_rejects_client_control_batch() -> None:
    data = encode_batch([b"a"]) + _marker()
    with pytest.raises(InvalidRequestError, match="control"):
        validate_batches(data, max_batch_bytes=LIMIT)


def test_validate_producer_fields() -> None:
    ok = encode_batch([b"a"], producer_id=5, producer_epoch=0, base_sequence=0)
    assert [h.producer_id for _, h in validate_batches(ok, max_batch_bytes=LIMIT)] == [5]
    plain = encode_batch([b"a"])
    assert validate_batches(plain, max_batch_bytes=LIMIT)[0][1].producer_id == -1
    for seq, epoch in [(-1, 0), (0, -1)]:
        bad = encode_batch([b"a"], producer_id=5, producer_epoch=epoch, base_sequence=seq)
        with pytest.raises(InvalidRequestError):
            validate_batches(bad, max_batch_bytes=LIMIT)
