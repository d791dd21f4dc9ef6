"""Helpers for the compaction tests: a fake clock, keyed batches, reading a log back."""

from __future__ import annotations

from dataclasses import dataclass

from headwater.batch import decode_batches, encode_batch, validate_batches
from headwater.batch.layout import Compression
from services.broker.storage.log import AppendInfo, Log

MAX_BATCH = 64 * 1024 * 1024
T0 = 1_700_000_000_000


@dataclass
class FakeClock:
    """Milliseconds that only move when the test says so."""

    now: int = T0

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def put(
    log: Log,
    items: list[tuple[bytes | None, bytes | None]],
    *,
    ts: int,
    codec: Compression = Compression.NONE,
) -> AppendInfo:
    """Append one batch of (key, value) records, all stamped ``ts``."""
    buf = encode_batch(
        [v for _, v in items], [k for k, _ in items], timestamps=ts, compression_type=codec
    )
    return log.append(buf, validate_batches(buf, max_batch_bytes=MAX_BATCH), 0)


def records(log: Log, start: int | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every (offset, key, value) from ``start`` (default: log start), reading batch by batch."""
    pos = log.log_start_offset if start is None else start
    out: list[tuple[int, bytes | None, bytes | None]] = []
    while pos < log.log_end_offset:
        s = log.read(pos, 1 << 20)
        if not s.data:
            break
        assert s.next_offset > pos
        for b in decode_batches(s.data):
            for r in b.records():
                if r.offset >= pos:
                    out.append((r.offset, r.key, r.value))
        pos = s.next_offset
    return out


def latest(log: Log) -> dict[bytes | None, tuple[int, bytes | None]]:
    """key -> (offset, value) of its last record in the log."""
    out: dict[bytes | None, tuple[int, bytes | None]] = {}
    for off, k, v in records(log):
        out[k] = (off, v)
    return out
