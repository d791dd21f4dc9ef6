"""Control batches: the transaction markers (COMMIT / ABORT) a partition leader writes.

Spec: docs/transactions.md "Control batches" and docs/batch-format.md "Control batches". A
control batch is an ordinary batch (``encode_batch``) with attributes ``0x70``
(transactional | control | has keys), codec none, ``base_sequence = -1`` and one record:

* key, 4 bytes: ``u16 version = 0, u16 type`` (0 ABORT, 1 COMMIT), little-endian;
* value, 6 bytes: ``u16 version = 0, i32 coordinator_epoch``, little-endian.

With no offset deltas and no headers the records section then has one fixed 56-byte layout
(every array padded to 8 bytes), so the whole batch is always 120 bytes and
:func:`parse_control_batch` reads it with one ``struct`` call: no column decoding.

Only the broker writes control batches; ``validate_batches`` rejects a produced batch with
the control bit set.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from headwater.batch.codec import encode_batch, verify_crc
from headwater.batch.layout import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_HAS_HEADERS,
    ATTR_HAS_KEYS,
    ATTR_HAS_OFFSET_DELTAS,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    BatchHeader,
    parse_header,
)
from headwater.errors import CorruptRecordError

CONTROL_KEY = struct.Struct("<HH")
CONTROL_VALUE = struct.Struct("<Hi")
ABORT = 0
COMMIT = 1
#: Size of every control batch (64-byte header + 56-byte records section).
CONTROL_BATCH_SIZE = 120

# The fixed records section: ts_delta(i32)+pad, key validity(u8)+pad, key offsets (2 x i32),
# key data (4)+pad, value validity(u8)+pad, value offsets (2 x i32), value data (6)+pad.
_SECTION = struct.Struct("<i4xB7xii4s4xB7xii6s2x")
assert HEADER_SIZE + _SECTION.size == CONTROL_BATCH_SIZE


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """What a transaction marker says."""

    committed: bool
    coordinator_epoch: int


def is_control(header: BatchHeader) -> bool:
    """Whether the batch is a control batch (attribute bit 5)."""
    return bool(header.attributes & ATTR_CONTROL)


def is_transactional(header: BatchHeader) -> bool:
    """Whether the batch belongs to a transaction (attribute bit 4; markers too)."""
    return bool(header.attributes & ATTR_TRANSACTIONAL)


def encode_control_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    committed: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytes:
    """One marker batch (base offset 0, leader epoch -1: the log patches both)."""
    key = CONTROL_KEY.pack(0, COMMIT if committed else ABORT)
    value = CONTROL_VALUE.pack(0, coordinator_epoch)
    return encode_batch(
        [value],
        [key],
        timestamps=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
    )


def parse_control_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> ControlRecord:
    """The marker in the control batch at ``buf[pos:]``, header and CRC checked.

    Raises :class:`CorruptRecordError` when the batch is not a well-formed control batch:
    wrong attributes or size, a record count other than 1, a CRC mismatch, a key or value
    of the wrong length or version, or an unknown marker type.
    """
    h = parse_header(buf, pos)
    wanted = ATTR_TRANSACTIONAL | ATTR_CONTROL | ATTR_HAS_KEYS
    bad_bits = ATTR_COMPRESSION_MASK | ATTR_HAS_HEADERS | ATTR_HAS_OFFSET_DELTAS
    if h.attributes & wanted != wanted or h.attributes & bad_bits:
        raise CorruptRecordError(f"not a control batch: attributes {h.attributes:#x}")
    if h.record_count != 1 or h.total_size != CONTROL_BATCH_SIZE:
        raise CorruptRecordError(
            f"control batch must be 1 record / {CONTROL_BATCH_SIZE} bytes, "
            f"got {h.record_count} / {h.total_size}"
        )
    if len(buf) - pos < CONTROL_BATCH_SIZE:
        raise CorruptRecordError("truncated control batch")
    verify_crc(buf, pos, h)
    _, kvalid, k0, k1, key, vvalid, v0, v1, value = _SECTION.unpack_from(buf, pos + HEADER_SIZE)
    if kvalid & 1 != 1 or vvalid & 1 != 1 or (k0, k1, v0, v1) != (0, 4, 0, 6):
        raise CorruptRecordError("control record key/value must be 4 and 6 bytes, non-null")
    key_version, kind = CONTROL_KEY.unpack(key)
    value_version, coordinator_epoch = CONTROL_VALUE.unpack(value)
    if key_version != 0 or value_version != 0 or kind not in (ABORT, COMMIT):
        raise CorruptRecordError(
            f"unknown control record (key version {key_version}, type {kind}, "
            f"value version {value_version})"
        )
    return ControlRecord(kind == COMMIT, coordinator_epoch)
