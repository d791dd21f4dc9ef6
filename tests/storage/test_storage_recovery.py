"""Crash recovery: torn tails, corrupt batches, damaged or missing indexes."""

from __future__ import annotations

import os
import random
import shutil
import struct
from pathlib import Path

from storage_helpers import append, make_batch, read_all

from headwater.batch import decode_batches
from headwater.config import TopicConfig
from services.broker.storage.log import Log


def _build(directory: Path, clock, batches: int, **cfg) -> tuple[list[int], list[bytes]]:
    """A closed log; returns the end position (in the active segment) and bytes of each batch."""
    log = Log(directory, TopicConfig(**cfg), clock=clock)
    ends, stored = [], []
    for i in range(batches):
        append(log, make_batch(1 + i % 4, value_size=20 + 7 * i, tag=i))
    data = read_all(log)
    pos = 0
    for b in decode_batches(data):
        stored.append(bytes(b.raw))
        pos += len(b.raw)
        ends.append(pos)
    log.close(mark_clean=False)  # as if the process died: no clean-shutdown marker
    return ends, stored


def test_torn_tail_at_many_random_positions(tmp_path, clock):
    template = tmp_path / "template" / "t-0"
    ends, stored = _build(template, clock, 40, index_interval_bytes=128)
    log_file = template / f"{0:020d}.log"
    size = log_file.stat().st_size
    rng = random.Random(1234)
    cuts = sorted({0, 1, 63, 64, ends[0] - 1, ends[0], size - 1, *rng.sample(range(size), 60)})
    for n, cut in enumerate(cuts):
        d = tmp_path / f"run{n}" / "t-0"
        shutil.copytree(template, d)
        with open(d / log_file.name, "r+b") as f:
            f.truncate(cut)
        log = Log(d, TopicConfig(index_interval_bytes=128), clock=clock)
        survivors = sum(1 for e in ends if e <= cut)
        assert log.recovered_bytes_truncated == cut - (ends[survivors - 1] if survivors else 0)
        got = decode_batches(read_all(log))
        assert [bytes(b.raw) for b in got] == stored[:survivors], f"cut at {cut}"
        expected_end = got[-1].header.next_offset if got else 0
        assert log.log_end_offset == expected_end
        # appends continue right after the last surviving batch
        assert append(log, make_batch(2)).first_offset == expected_end
        assert log.read(expected_end, 1 << 20).first_offset == expected_end
        log.close()


def test_crc_corruption_mid_segment_truncates_from_the_damaged_batch(tmp_path, clock):
    d = tmp_path / "t-0"
    ends, stored = _build(d, clock, 30, index_interval_bytes=64)
    victim = 12
    with open(d / f"{0:020d}.log", "r+b") as f:
        f.seek(ends[victim - 1] + 100)  # inside batch 12's records: only the CRC notices
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    log = Log(d, TopicConfig(index_interval_bytes=64), clock=clock)
    got = [bytes(b.raw) for b in decode_batches(read_all(log))]
    assert got == stored[:victim]
    assert log.size_in_bytes == ends[victim - 1]
    next_offset = decode_batches(stored[victim - 1])[0].header.next_offset
    assert log.log_end_offset == next_offset
    assert append(log, make_batch(1)).first_offset == next_offset


def test_corruption_in_a_sealed_segment_drops_everything_after_it(tmp_path, clock):
    d = tmp_path / "t-0"
    log = Log(d, TopicConfig(segment_bytes=1024), clock=clock)
    for i in range(40):
        append(log, make_batch(2, value_size=40, tag=i))
    bases = log.segment_base_offsets()
    assert len(bases) >= 4
    log.close()
    os.unlink(d / f"{bases[1]:020d}.index")  # force a check of segment 1 ...
    with open(d / f"{bases[1]:020d}.log", "r+b") as f:  # ... which finds a bad CRC
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 0xFF]))
    log = Log(d, TopicConfig(segment_bytes=1024), clock=clock)
    assert log.segment_base_offsets() == bases[:2]
    assert log.log_end_offset < bases[2]
    assert all(b.header.last_offset < log.log_end_offset for b in decode_batches(read_all(log)))
    assert sorted(p.name for p in d.glob("*.log")) == [f"{b:020d}.log" for b in bases[:2]]


def test_clean_shutdown_skips_the_scan_and_unclean_open_scans(tmp_path, clock, monkeypatch):
    d = tmp_path / "t-0"
    log = Log(d, TopicConfig(segment_bytes=2048), clock=clock)
    for i in range(30):
        append(log, make_batch(2, tag=i))
    log.close()
    calls = []
    original = Log.__init__.__globals__["LogSegment"].recover

    def spy(self, **kw):
        calls.append(self.base_offset)
        return original(self, **kw)

    monkeypatch.setattr(Log.__init__.__globals__["LogSegment"], "recover", spy)
    Log(d, TopicConfig(segment_bytes=2048), clock=clock).close(mark_clean=False)
    assert calls == []
    reopened = Log(d, TopicConfig(segment_bytes=2048), clock=clock)
    assert calls == [reopened.segment_base_offsets()[-1]]  # only the active segment
    assert reopened.log_end_offset == 60


def _index_files(d: Path, suffix: str) -> list[Path]:
    return sorted(d.glob(f"*.{suffix}"))


def _lookups_after_reopen(d: Path, clock, damage) -> None:
    cfg = TopicConfig(segment_bytes=4096, index_interval_bytes=100)
    log = Log(d, cfg, clock=clock)
    for i in range(60):
        append(log, make_batch(3, ts=10_000 + 10 * i, tag=i))
    before = read_all(log)
    entries = [len(s.offset_index) for s in log._snap.segments]
    time_entries = [len(s.time_index) for s in log._snap.segments]
    log.close()
    damage(d)
    log = Log(d, cfg, clock=clock)
    assert read_all(log) == before
    assert [len(s.offset_index) for s in log._snap.segments] == entries
    assert [len(s.time_index) for s in log._snap.segments] == time_entries
    for off in range(0, 180, 7):
        assert log.read(off, 1).first_offset == off - off % 3
    m = log.offset_for_timestamp(10_000 + 10 * 33 + 1)
    assert m is not None
    assert (m.offset, m.timestamp) == (33 * 3 + 1, 10_000 + 10 * 33 + 1)
    for p in [*_index_files(d, "index"), *_index_files(d, "timeindex")]:
        assert p.stat().st_size > 0
    log.close()


def test_index_files_deleted_are_rebuilt(tmp_path, clock):
    def damage(d):
        for p in [*_index_files(d, "index"), *_index_files(d, "timeindex")]:
            p.unlink()

    _lookups_after_reopen(tmp_path / "t-0", clock, damage)


def test_garbage_index_files_are_rebuilt(tmp_path, clock):
    rng = random.Random(7)

    def damage(d):
        files = [*_index_files(d, "index"), *_index_files(d, "timeindex")]
        for i, p in enumerate(files):
            size = p.stat().st_size
            if i % 3 == 0:
                p.write_bytes(rng.randbytes(size + 3))  # wrong size
            elif i % 3 == 1:
                p.write_bytes(rng.randbytes(size))  # right size, nonsense entries
            else:
                p.write_bytes(p.read_bytes()[::-1])  # reversed: not monotonic

    _lookups_after_reopen(tmp_path / "t-0", clock, damage)


def test_index_pointing_at_a_wrong_batch_is_rebuilt(tmp_path, clock):
    def damage(d):
        # still monotonic and in range, but every position now points 8 bytes into a batch
        for p in _index_files(d, "index"):
            data = bytearray(p.read_bytes())
            for k in range(4, len(data), 8):
                (pos,) = struct.unpack_from("<I", data, k)
                struct.pack_into("<I", data, k, pos + 8)
            p.write_bytes(bytes(data))

    _lookups_after_reopen(tmp_path / "t-0", clock, damage)


def test_empty_directory_and_missing_checkpoint(tmp_path, clock):
    d = tmp_path / "t-0"
    log = Log(d, TopicConfig(), clock=clock)
    append(log, make_batch(2))
    log.close()
    (d / "partition.checkpoint").unlink()
    reopened = Log(d, TopicConfig(), clock=clock)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (0, 2)
    reopened.close()


def test_rebuilt_time_index_of_a_sealed_segment_keeps_its_largest_timestamp(tmp_path, clock):
    d = tmp_path / "t-0"
    cfg = TopicConfig(segment_bytes=1024, index_interval_bytes=1 << 20)  # no interval entries
    log = Log(d, cfg, clock=clock)
    for i in range(12):
        append(log, make_batch(2, ts=1000 + i, value_size=100, tag=i))
    largest = [s.largest_timestamp() for s in log._snap.segments[:-1]]
    log.close()
    for p in _index_files(d, "timeindex"):
        p.unlink()
    Log(d, cfg, clock=clock).close()  # rebuilds, then shuts down cleanly
    reopened = Log(d, cfg, clock=clock)  # clean open: reads the rebuilt files only
    assert [s.largest_timestamp() for s in reopened._snap.segments[:-1]] == largest
    reopened.close()
