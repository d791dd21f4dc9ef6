"""Helpers shared by the storage tests: a fake clock, batch builders, read-everything."""

from __future__ import annotations

from dataclasses import dataclass

from headwater.batch import BatchHeader, encode_batch, validate_batches
from services.broker.storage.log import AppendInfo, Log

MAX_BATCH = 64 * 1024 * 1024


@dataclass
class FakeClock:
    """Milliseconds that only move when the test says so."""

    now: int = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def make_batch(
    n: int = 3, *, ts: int = 1_700_000_000_000, value_size: int = 10, tag: int = 0
) -> bytes:
    """One encoded batch of ``n`` records with distinct values."""
    values = [f"{tag}:{i}".encode().ljust(value_size, b"x") for i in range(n)]
    return encode_batch(values, timestamps=[ts + i for i in range(n)])


def headers_of(buf: bytes) -> list[tuple[int, BatchHeader]]:
    return validate_batches(buf, max_batch_bytes=MAX_BATCH)


def append(log: Log, buf: bytes, epoch: int = 0) -> AppendInfo:
    return log.append(buf, headers_of(buf), epoch)


def read_all(log: Log, start: int | None = None) -> bytes:
    """Every batch from ``start`` (default: log start) to the end, concatenated."""
    pos = log.log_start_offset if start is None else start
    out = bytearray()
    while pos < log.log_end_offset:
        s = log.read(pos, 1 << 20)
        assert s.data and s.next_offset > pos
        out += s.data
        pos = s.next_offset
    return bytes(out)
