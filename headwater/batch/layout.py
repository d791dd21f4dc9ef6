"""The record-batch header: byte layout, attribute bits and header parsing.

A record batch is the unit on the wire, on disk, to followers and to consumers. All integers
are little-endian. The header is 64 bytes, so the records section starts 8-byte aligned::

    offset size field                  notes
    0      8    base_offset  int64     assigned by the leader (patched in place)
    8      4    batch_length int32     bytes after this field; total size = 12 + batch_length
    12     4    partition_leader_epoch int32   patched in place by the leader
    16     3    magic        b"HWB"
    19     1    version      uint8     = 1
    20     4    crc          uint32    CRC32C (Castagnoli) of bytes [24, total)
    24     2    attributes   int16     see ATTR_* below
    26     2    producer_epoch int16   -1 when not idempotent
    28     4    last_offset_delta int32   offset of the last record - base_offset
    32     8    first_timestamp int64  ms since the epoch
    40     8    max_timestamp int64
    48     8    producer_id  int64     -1 when not idempotent
    56     4    base_sequence int32    -1 when not idempotent
    60     4    record_count int32     >= 1
    64     ...  records section (see headwater.batch.columns)

The CRC covers everything from ``attributes`` on, so the leader can patch ``base_offset`` and
``partition_leader_epoch`` without recomputing it. The total size of a batch is always a
multiple of 8, so batches concatenated in a log or a fetch response keep 8-byte alignment.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from headwater.errors import CorruptRecordError, UnsupportedCompressionTypeError

HEADER = struct.Struct("<qii3sBIhhiqqqii")
HEADER_SIZE = HEADER.size  # 64
assert HEADER_SIZE == 64

MAGIC = b"HWB"
VERSION = 1
#: Offset of the first byte the CRC covers.
CRC_START = 24
#: Bytes before ``batch_length``'s payload: base_offset (8) + batch_length (4).
LOG_OVERHEAD = 12
ALIGNMENT = 8

BASE_OFFSET = struct.Struct("<q")
LEADER_EPOCH_AT = 12
LEADER_EPOCH = struct.Struct("<i")
BASE_AND_LENGTH = struct.Struct("<qi")

# attribute bits
ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_HAS_KEYS = 0x40
ATTR_HAS_HEADERS = 0x80
ATTR_HAS_OFFSET_DELTAS = 0x100
ATTR_KNOWN = 0x1FF

#: Largest records section a decoder will inflate to (guards against compression bombs).
DEFAULT_MAX_UNCOMPRESSED = 256 * 1024 * 1024


class Compression(enum.IntEnum):
    """Codec of the records section, in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    LZ4 = 2
    ZSTD = 3

    @classmethod
    def parse(cls, name: str | int | Compression | None) -> Compression:
        """``"lz4"``, ``"ZSTD"``, ``None`` (none), an int or a member."""
        if name is None or name == "":
            return cls.NONE
        if isinstance(name, Compression):
            return name
        if isinstance(name, int):
            try:
                return cls(name)
            except ValueError:
                raise UnsupportedCompressionTypeError(f"unknown codec id {name}") from None
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise UnsupportedCompressionTypeError(
                f"unknown compression {name!r} (expected none, gzip, lz4 or zstd)"
            ) from None


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The parsed 64-byte header of one batch (a value; parsing never copies the batch)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: bytes
    version: int
    crc: int
    attributes: int
    producer_epoch: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    base_sequence: int
    record_count: int

    @property
    def total_size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & ATTR_COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & ATTR_LOG_APPEND_TIME:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse and check the header at ``buf[pos:]`` (not the CRC; see :func:`verify_crc`).

    Raises :class:`CorruptRecordError` when fewer than 64 bytes remain, the magic or version is
    unknown, a length or count is out of range, or the attribute bits are invalid. Does not
    require the whole batch to be present: callers compare ``total_size`` with what they have.
    """
    if pos < 0 or len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated batch header: {max(0, len(buf) - pos)} of {HEADER_SIZE} bytes"
        )
    h = BatchHeader(*HEADER.unpack_from(buf, pos))
    if h.version != VERSION or h.magic != MAGIC:
        raise CorruptRecordError(
            f"unknown magic/version {bytes(buf[pos + 16 : pos + 20])!r} at byte {pos}"
        )
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or h.total_size % ALIGNMENT:
        raise CorruptRecordError(
            f"invalid batch_length {h.batch_length} (must be >= 52 with total a multiple of 8)"
        )
    if h.record_count < 1:
        raise CorruptRecordError(f"invalid record_count {h.record_count}")
    if h.last_offset_delta < h.record_count - 1:
        raise CorruptRecordError(
            f"last_offset_delta {h.last_offset_delta} < record_count - 1 ({h.record_count - 1})"
        )
    if not h.attributes & ATTR_HAS_OFFSET_DELTAS and h.last_offset_delta != h.record_count - 1:
        raise CorruptRecordError(
            f"record_count {h.record_count} does not match last_offset_delta "
            f"{h.last_offset_delta} of a dense batch"
        )
    if h.attributes & ~ATTR_KNOWN or h.attributes < 0:
        raise CorruptRecordError(f"unknown attribute bits {h.attributes:#x}")
    if (h.attributes & ATTR_COMPRESSION_MASK) > Compression.ZSTD:
        raise UnsupportedCompressionTypeError(
            f"unknown codec id {h.attributes & ATTR_COMPRESSION_MASK}"
        )
    if h.max_timestamp < h.first_timestamp and not h.attributes & ATTR_LOG_APPEND_TIME:
        raise CorruptRecordError(
            f"max_timestamp {h.max_timestamp} < first_timestamp {h.first_timestamp}"
        )
    return h
