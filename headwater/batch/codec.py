"""Encoding whole batches, walking concatenated batches, and decoding them into columns.

Who uses what:

* producers call :func:`encode_batch` (one call per batch, no per-record Python loop), or
  :func:`encode_batch_pieces` to join the batch into their request themselves;
* the broker calls :func:`validate_batches` on produce (header + CRC only: it never
  decompresses), then :func:`patch_header` to assign offsets, and serves the bytes unchanged;
* consumers call :func:`decode_batches` / :class:`RecordBatch` (CRC checked, decompressed,
  columns as views; ``to_arrow()`` for Spark and pandas).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np

from headwater.batch import columns as cols
from headwater.batch import compression
from headwater.batch.encode_loops import crc32c_extend, int32_deltas
from headwater.batch.layout import (
    ATTR_CONTROL,
    ATTR_HAS_HEADERS,
    ATTR_HAS_KEYS,
    ATTR_HAS_OFFSET_DELTAS,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    BASE_OFFSET,
    CRC_START,
    DEFAULT_MAX_UNCOMPRESSED,
    HEADER,
    HEADER_SIZE,
    LEADER_EPOCH,
    LEADER_EPOCH_AT,
    MAGIC,
    VERSION,
    BatchHeader,
    Compression,
    TimestampType,
    parse_header,
)
from headwater.errors import (
    CorruptRecordError,
    InvalidRequestError,
    InvalidTimestampError,
    MessageTooLargeError,
)

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_I32_LE = np.dtype("<i4")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def encode_batch(
    values: Sequence[cols.Binary | None],
    keys: Sequence[cols.Binary | None] | None = None,
    **kw: Any,
) -> bytes:
    """Encode one batch of ``len(values)`` records and return its bytes (the arguments are
    :func:`encode_batch_pieces`'s)."""
    return b"".join(encode_batch_pieces(values, keys, **kw))


def encode_batch_pieces(
    values: Sequence[cols.Binary | None],
    keys: Sequence[cols.Binary | None] | None = None,
    *,
    headers: Sequence[Sequence[cols.Header]] | None = None,
    timestamps: Sequence[int] | np.ndarray | int | None = None,
    compression_type: Compression | str | None = Compression.NONE,
    compression_level: int | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    offset_deltas: Sequence[int] | np.ndarray | None = None,
    values_as_pieces: bool = False,
) -> list[cols.Binary]:
    """Encode one batch of ``len(values)`` records: the pieces whose concatenation is its
    bytes, the header first (CRC included).

    ``keys`` and ``headers``, when given, are parallel to ``values``; ``None`` entries are null.
    ``timestamps``: None (now, for every record), one int for all, or one per record (ms).
    ``offset_deltas`` is only for rewriting batches (compaction); producers leave it None.
    ``values_as_pieces`` (uncompressed batches only; ignored with compression): every value
    is a piece of its own instead of one joined piece, so a caller that joins the pieces
    into something larger (a produce request) copies large values once, not twice; the CRC
    is then computed piece by piece (worth it for values of a few hundred bytes and more).
    """
    n = len(values)
    if n == 0:
        raise ValueError("a batch holds at least one record")
    codec = Compression.parse(compression_type)

    if timestamps is None or isinstance(timestamps, int):
        first = now_ms() if timestamps is None else int(timestamps)
        ts_deltas = np.zeros(n, dtype=np.int32)
        max_ts = first
    elif (
        type(timestamps) is list
        and len(timestamps) == n
        and (fast := int32_deltas(timestamps, timestamps[0])) is not None
    ):  # a producer's per-record timestamps: no int64 array of them first
        first = timestamps[0]
        ts_deltas = np.frombuffer(fast, dtype=_I32_LE)
        max_ts = first + int(ts_deltas.max())
    else:
        ts = np.asarray(timestamps, dtype=np.int64)
        if ts.shape != (n,):
            raise ValueError(f"{ts.shape[0] if ts.ndim else 1} timestamps for {n} values")
        first = int(ts[0])
        deltas = ts - first
        if deltas.size and (int(deltas.min()) < _INT32_MIN or int(deltas.max()) > _INT32_MAX):
            raise InvalidTimestampError("timestamps of one batch must lie within ±24 days")
        ts_deltas = deltas.astype(np.int32)
        max_ts = int(ts.max())

    attrs = int(codec)
    last_delta = n - 1
    od: np.ndarray | None = None
    if offset_deltas is not None:
        od = np.asarray(offset_deltas, dtype=np.int64)
        if od.shape != (n,) or int(od[0]) < 0 or bool(np.any(od[1:] <= od[:-1])):
            raise ValueError("offset_deltas must be strictly increasing from >= 0")
        last_delta = int(od[-1])
        od = od.astype(np.int32)
        attrs |= ATTR_HAS_OFFSET_DELTAS

    pieces, size, has_keys, has_headers = cols.encode_columns(
        values,
        keys,
        headers,
        ts_deltas,
        od,
        values_as_pieces=values_as_pieces and codec == Compression.NONE,
    )
    if has_keys:
        attrs |= ATTR_HAS_KEYS
    if has_headers:
        attrs |= ATTR_HAS_HEADERS
    if transactional:
        attrs |= ATTR_TRANSACTIONAL
    if control:
        attrs |= ATTR_CONTROL
    if codec != Compression.NONE:
        pieces = [*compression.compress(codec, b"".join(pieces), compression_level)]
        size = sum(map(len, pieces))

    total = HEADER_SIZE + size
    header = bytearray(
        HEADER.pack(
            base_offset,
            total - 12,
            partition_leader_epoch,
            MAGIC,
            VERSION,
            0,
            attrs,
            producer_epoch,
            last_delta,
            first,
            max_ts,
            producer_id,
            base_sequence,
            n,
        )
    )
    crc = crc32c.crc32c(memoryview(header)[CRC_START:])
    try:
        crc = crc32c_extend(crc, pieces)
    except TypeError as exc:
        raise TypeError(f"values must be bytes-like or None: {exc}") from None
    HEADER.pack_into(
        header,
        0,
        base_offset,
        total - 12,
        partition_leader_epoch,
        MAGIC,
        VERSION,
        crc,
        attrs,
        producer_epoch,
        last_delta,
        first,
        max_ts,
        producer_id,
        base_sequence,
        n,
    )
    pieces.insert(0, bytes(header))
    return pieces


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> int:
    return int(crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + header.total_size]))


def verify_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    actual = compute_crc(buf, pos, header)
    if actual != header.crc:
        raise CorruptRecordError(
            f"CRC mismatch in batch at byte {pos} (base offset {header.base_offset}): "
            f"header {header.crc:#010x}, computed {actual:#010x}"
        )


def iter_headers(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch in ``buf``; the batches must fill it exactly.

    Checks each header and that the batch lies inside ``buf`` — not the CRC.
    """
    pos, end = 0, len(buf)
    while pos < end:
        h = parse_header(buf, pos)
        if pos + h.total_size > end:
            raise CorruptRecordError(
                f"batch at byte {pos} declares {h.total_size} bytes, only {end - pos} remain"
            )
        yield pos, h
        pos += h.total_size


def validate_batches(
    buf: bytes | bytearray | memoryview, *, max_batch_bytes: int
) -> list[tuple[int, BatchHeader]]:
    """Broker-side produce validation: every header, size limit and CRC, nothing decoded.

    Producer fields: a batch with ``producer_id >= 0`` (idempotent) must carry
    ``base_sequence >= 0`` and ``producer_epoch >= 0``; a batch with the control bit set is
    never accepted from a client (only the leader writes markers). Both are
    InvalidRequestError. Returns the batches' positions and headers. Raises before the
    caller appends anything.
    """
    if len(buf) == 0:
        raise CorruptRecordError("no record batch in request")
    found: list[tuple[int, BatchHeader]] = []
    for pos, h in iter_headers(buf):
        if h.total_size > max_batch_bytes:
            raise MessageTooLargeError(
                f"batch of {h.total_size} bytes exceeds max.message.bytes={max_batch_bytes}"
            )
        if h.base_offset != 0 and h.producer_id < 0:
            # producers always send base offset 0; anything else is a malformed client
            raise CorruptRecordError(f"produced batch has base_offset {h.base_offset}, expected 0")
        if h.attributes & ATTR_CONTROL:
            raise InvalidRequestError("clients cannot produce control batches")
        if h.producer_id >= 0 and (h.base_sequence < 0 or h.producer_epoch < 0):
            raise InvalidRequestError(
                f"idempotent batch of producer {h.producer_id} has sequence "
                f"{h.base_sequence} / epoch {h.producer_epoch} (both must be >= 0)"
            )
        verify_crc(buf, pos, h)
        found.append((pos, h))
    return found


def patch_header(header_bytes: bytearray | memoryview, base_offset: int, leader_epoch: int) -> None:
    """Assign a batch's offsets and leader epoch in place (fields outside the CRC)."""
    BASE_OFFSET.pack_into(header_bytes, 0, base_offset)
    LEADER_EPOCH.pack_into(header_bytes, LEADER_EPOCH_AT, leader_epoch)


def set_log_append_time(batch: bytearray, timestamp: int) -> None:
    """Stamp a batch with the broker's clock (message.timestamp.type=LogAppendTime).

    Sets max_timestamp and the attribute bit, then recomputes the CRC (the one case where the
    broker touches a covered field; the records section is untouched).
    """
    h = parse_header(batch, 0)
    fields = list(HEADER.unpack_from(batch, 0))
    fields[6] = h.attributes | ATTR_LOG_APPEND_TIME
    fields[10] = timestamp
    HEADER.pack_into(batch, 0, *fields)
    fields[5] = int(crc32c.crc32c(memoryview(batch)[CRC_START : h.total_size]))
    HEADER.pack_into(batch, 0, *fields)


def with_base_sequence(batch: bytes, base_sequence: int) -> bytes:
    """A copy of an encoded batch with another ``base_sequence`` and its CRC recomputed.

    For an idempotent producer whose earlier batch failed for good: the batches after it
    move down in sequence space and are resent with the new numbers (the records section is
    not touched).
    """
    out = bytearray(batch)
    h = parse_header(out, 0)
    fields = list(HEADER.unpack_from(out, 0))
    fields[12] = base_sequence
    HEADER.pack_into(out, 0, *fields)
    fields[5] = compute_crc(out, 0, h)
    HEADER.pack_into(out, 0, *fields)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class Record:
    """One record, materialised (convenience path; the fast path works on columns)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class RecordBatch:
    """A validated batch and lazy access to its columns.

    Construction checks the header and CRC; columns are decoded (and decompressed) on first
    use. Arrays returned by the column accessors are read-only views into the batch bytes.
    """

    __slots__ = ("_columns", "_max_uncompressed", "header", "raw")

    def __init__(
        self,
        raw: bytes | memoryview,
        header: BatchHeader | None = None,
        *,
        check_crc: bool = True,
        max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
    ) -> None:
        h = header if header is not None else parse_header(raw, 0)
        if len(raw) != h.total_size:
            raise CorruptRecordError(f"batch is {len(raw)} bytes, header says {h.total_size}")
        if check_crc:
            verify_crc(raw, 0, h)
        self.raw = raw
        self.header = h
        self._max_uncompressed = max_uncompressed
        self._columns: cols.Columns | None = None

    def __len__(self) -> int:
        return self.header.record_count

    @property
    def columns(self) -> cols.Columns:
        if self._columns is None:
            h = self.header
            section: memoryview = memoryview(self.raw)[HEADER_SIZE:]
            if h.compression != Compression.NONE:
                section = memoryview(
                    compression.decompress(h.compression, section, self._max_uncompressed)
                )
            c = cols.decode_columns(
                section,
                h.record_count,
                has_keys=bool(h.attributes & ATTR_HAS_KEYS),
                has_headers=bool(h.attributes & ATTR_HAS_HEADERS),
                has_offsets=bool(h.attributes & ATTR_HAS_OFFSET_DELTAS),
            )
            if c.offset_deltas is not None and (
                int(c.offset_deltas[0]) < 0
                or int(c.offset_deltas[-1]) != h.last_offset_delta
                or bool(np.any(c.offset_deltas[1:] <= c.offset_deltas[:-1]))
            ):
                raise CorruptRecordError("offset deltas are not increasing up to last_offset_delta")
            self._columns = c
        return self._columns

    def offsets(self) -> np.ndarray:
        c = self.columns
        if c.offset_deltas is None:
            return np.arange(self.header.base_offset, self.header.base_offset + c.count)
        return c.offset_deltas.astype(np.int64) + self.header.base_offset

    def timestamps(self) -> np.ndarray:
        h = self.header
        if h.timestamp_type == TimestampType.LOG_APPEND_TIME:
            return np.full(h.record_count, h.max_timestamp, dtype=np.int64)
        return self.columns.timestamp_deltas.astype(np.int64) + h.first_timestamp

    def values(self, start: int = 0, stop: int | None = None) -> list[bytes | None]:
        """Values of records ``start..stop`` (default: every record); only those are
        converted to Python bytes."""
        return self.columns.values.to_pylist(start, stop)

    def keys(self, start: int = 0, stop: int | None = None) -> list[bytes | None]:
        """Keys of records ``start..stop`` (default: every record), None for a null key."""
        k = self.columns.keys
        if k is None:
            end = len(self) if stop is None else min(stop, len(self))
            return [None] * max(0, end - start)
        return k.to_pylist(start, stop)

    def headers(
        self, start: int = 0, stop: int | None = None
    ) -> list[tuple[tuple[str, bytes | None], ...]]:
        """Headers of records ``start..stop`` (default: every record): a tuple of
        ``(key, value)`` pairs each; only those records' headers are converted."""
        c = self.columns
        end = c.count if stop is None else min(stop, c.count)
        if c.header_offsets is None:
            return [()] * max(0, end - start)
        assert c.header_keys is not None and c.header_values is not None
        o = c.header_offsets[start : end + 1].tolist()
        if not o:
            return []
        first, last = o[0], o[-1]
        hk = [k.decode() if k is not None else "" for k in c.header_keys.to_pylist(first, last)]
        hv = c.header_values.to_pylist(first, last)
        pairs = list(zip(hk, hv, strict=True))
        return [tuple(pairs[o[i] - first : o[i + 1] - first]) for i in range(len(o) - 1)]

    def records(self) -> list[Record]:
        """Materialised records (one Python object each: for convenience, not speed)."""
        return [
            Record(*row)
            for row in zip(
                self.offsets().tolist(),
                self.timestamps().tolist(),
                self.keys(),
                self.values(),
                self.headers(),
                strict=True,
            )
        ]

    def to_arrow(self) -> Any:
        """A ``pyarrow.RecordBatch`` with columns offset, timestamp, key, value, headers.

        key and value point at the batch's bytes (zero copy); offset and timestamp are
        computed with one vectorised add each.
        """
        import pyarrow as pa

        c = self.columns
        n = c.count
        if c.keys is None:
            keys = pa.nulls(n, pa.binary())
        else:
            keys = cols._binary_array(pa.binary(), c.keys, n)
        values = cols._binary_array(pa.binary(), c.values, n)
        arrays = [
            pa.array(self.offsets(), pa.int64()),
            pa.array(self.timestamps(), pa.timestamp("ms")),
            keys,
            values,
            self._arrow_headers(pa, c, n),
        ]
        return pa.RecordBatch.from_arrays(
            arrays, names=["offset", "timestamp", "key", "value", "headers"]
        )

    @staticmethod
    def _arrow_headers(pa: Any, c: cols.Columns, n: int) -> Any:
        entry = pa.struct([("key", pa.string()), ("value", pa.binary())])
        if c.header_offsets is None:
            offsets = pa.py_buffer(np.zeros(n + 1, dtype=np.int32))
            empty = pa.StructArray.from_arrays(
                [pa.array([], pa.string()), pa.array([], pa.binary())], fields=list(entry)
            )
            return pa.ListArray.from_buffers(pa.list_(entry), n, [None, offsets], children=[empty])
        assert c.header_keys is not None and c.header_values is not None
        h = int(c.header_offsets[-1])
        hk = cols._binary_array(pa.string(), c.header_keys, h)
        hv = cols._binary_array(pa.binary(), c.header_values, h)
        structs = pa.StructArray.from_arrays([hk, hv], fields=list(entry))
        return pa.ListArray.from_buffers(
            pa.list_(entry), n, [None, pa.py_buffer(c.header_offsets)], children=[structs]
        )


def decode_batches(
    buf: bytes | memoryview,
    *,
    check_crc: bool = True,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
) -> list[RecordBatch]:
    """Split concatenated batches (a fetch response, a log slice) into RecordBatch objects."""
    view = memoryview(buf)
    return [
        RecordBatch(
            view[pos : pos + h.total_size],
            h,
            check_crc=check_crc,
            max_uncompressed=max_uncompressed,
        )
        for pos, h in iter_headers(view)
    ]
