"""Append and read cost does not grow with the log: count the reads a lookup makes."""

from __future__ import annotations

import os

from storage_helpers import append, make_batch

from services.broker.storage import segment


class _CountingPread:
    def __init__(self) -> None:
        self.calls = 0
        self.bytes = 0
        self._real = os.pread

    def __call__(self, fd: int, n: int, pos: int) -> bytes:
        data = self._real(fd, n, pos)
        self.calls += 1
        self.bytes += len(data)
        return data


def _fill(log, batches: int) -> None:
    b = make_batch(8, value_size=100)
    for _ in range(batches):
        append(log, b)


def _cost(log, offset: int, monkeypatch) -> tuple[int, int]:
    counter = _CountingPread()
    monkeypatch.setattr(segment.os, "pread", counter)
    s = log.read(offset, 1)
    monkeypatch.setattr(segment.os, "pread", counter._real)
    assert s.first_offset <= offset < s.next_offset
    return counter.calls, counter.bytes


def test_read_cost_is_independent_of_log_size(open_log, tmp_path, monkeypatch):
    small = open_log(tmp_path / "small-0", segment_bytes=64 * 1024 * 1024)
    large = open_log(tmp_path / "large-0", segment_bytes=64 * 1024 * 1024)
    _fill(small, 100)
    _fill(large, 10_000)  # ~10 MB, one segment: a linear scan would read it all
    assert large.size_in_bytes > 90 * small.size_in_bytes
    for offset in (0, 3, 64 * 8 + 5):
        assert _cost(small, offset, monkeypatch) == _cost(large, offset, monkeypatch)
    # deep in the large log, a lookup still reads about one index interval plus the batch
    calls, nbytes = _cost(large, 9_000 * 8 + 3, monkeypatch)
    assert calls <= 3 and nbytes <= 2 * segment.SCAN_CHUNK + 4096


def test_read_cost_with_many_segments(open_log, tmp_path, monkeypatch):
    log = open_log(tmp_path / "many-0", segment_bytes=16 * 1024)
    _fill(log, 3000)
    assert log.num_segments > 100
    for offset in (0, 12_345, log.log_end_offset - 1):
        calls, nbytes = _cost(log, offset, monkeypatch)
        assert calls <= 3 and nbytes <= 2 * segment.SCAN_CHUNK + 4096


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_sealed_segments_hold_one_descriptor_each(open_log, tmp_path):
    before = _open_fds()
    log = open_log(tmp_path / "fds-0", segment_bytes=2048)
    _fill(log, 200)
    assert log.num_segments > 50
    # one log fd per segment, plus the active segment's two index fds
    assert _open_fds() - before == log.num_segments + 2
    log.close()
    assert _open_fds() == before
    reopened = open_log(tmp_path / "fds-0", segment_bytes=2048)
    assert _open_fds() - before == reopened.num_segments + 2
