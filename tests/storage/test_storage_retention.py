"""Retention by time and size: whole segments, never the active one, offsets unchanged."""

from __future__ import annotations

import pytest
from storage_helpers import append, make_batch, read_all

from headwater.batch import decode_batches
from headwater.errors import OffsetOutOfRangeError

pytestmark = pytest.mark.fast


def _fill(log, batches: int, *, ts0: int, step: int) -> list[bytes]:
    for i in range(batches):
        append(log, make_batch(4, ts=ts0 + step * i, value_size=60, tag=i))
    return [bytes(b.raw) for b in decode_batches(read_all(log))]


def test_retention_by_time_deletes_whole_old_segments(open_log, clock):
    log = open_log(segment_bytes=2048, retention_ms=10_000)
    now = clock.now
    stored = _fill(log, 40, ts0=now - 100_000, step=1000)  # newest record: now - 61_000 + 3
    bases = log.segment_base_offsets()
    assert len(bases) > 3
    # everything is older than retention, but the active segment stays
    deleted = log.delete_retention(now)
    assert deleted == len(bases) - 1
    assert log.segment_base_offsets() == bases[-1:]
    assert log.log_start_offset == bases[-1]
    remaining = decode_batches(read_all(log))
    assert remaining[0].header.base_offset == bases[-1]
    assert [bytes(b.raw) for b in remaining] == [
        s for s in stored if decode_batches(s)[0].header.base_offset >= bases[-1]
    ]
    assert not list(log.dir.glob(f"{bases[0]:020d}.*"))


def _segment_stats(log) -> list[tuple[int, int, int]]:
    """(base offset, byte size, largest timestamp) of each segment, from the bytes read."""
    bases = log.segment_base_offsets()
    stats = []
    for i, base in enumerate(bases):
        end = bases[i + 1] if i + 1 < len(bases) else log.log_end_offset
        batches = [b for b in decode_batches(read_all(log)) if base <= b.header.base_offset < end]
        stats.append(
            (base, sum(len(b.raw) for b in batches), max(b.header.max_timestamp for b in batches))
        )
    return stats


def test_retention_by_time_keeps_segments_with_a_recent_record(open_log, clock):
    log = open_log(segment_bytes=2048, retention_ms=50_000)
    now = clock.now
    _fill(log, 40, ts0=now - 100_000, step=2000)  # batch i at now - 100_000 + 2000 i
    stats = _segment_stats(log)
    expired = 0
    while expired < len(stats) - 1 and now - stats[expired][2] > 50_000:
        expired += 1
    assert 0 < expired < len(stats) - 1
    assert log.delete_retention(now) == expired
    assert log.segment_base_offsets() == [s[0] for s in stats[expired:]]
    assert log.log_start_offset == stats[expired][0]
    assert log.delete_retention(now) == 0  # idempotent


def test_retention_by_time_is_not_applied_with_minus_one(open_log, clock):
    log = open_log(segment_bytes=1024, retention_ms=-1)
    _fill(log, 20, ts0=0, step=1)
    n = log.num_segments
    assert log.delete_retention(clock.now) == 0 and log.num_segments == n


def test_retention_by_size_keeps_the_log_under_the_limit_in_whole_segments(open_log, clock):
    log = open_log(segment_bytes=2048, retention_bytes=5000, retention_ms=-1)
    stored = _fill(log, 60, ts0=clock.now, step=1)
    stats = _segment_stats(log)
    total = sum(s[1] for s in stats)
    assert total == log.size_in_bytes
    expected, excess = 0, total - 5000
    while expected < len(stats) - 1 and excess - stats[expected][1] >= 0:
        excess -= stats[expected][1]
        expected += 1
    assert expected > 0
    assert log.delete_retention(clock.now) == expected
    assert log.size_in_bytes == sum(s[1] for s in stats[expected:])
    assert log.size_in_bytes >= 5000  # never below the limit, by whole segments
    assert log.size_in_bytes == sum(p.stat().st_size for p in log.dir.glob("*.log"))
    # remaining records keep their offsets and bytes
    remaining = [bytes(b.raw) for b in decode_batches(read_all(log))]
    assert remaining == stored[len(stored) - len(remaining) :]
    assert decode_batches(remaining[0])[0].header.base_offset == log.log_start_offset


def test_retention_never_deletes_the_active_segment(open_log, clock):
    log = open_log(retention_bytes=0, retention_ms=0)
    _fill(log, 5, ts0=0, step=1)
    clock.advance(10**9)
    assert log.delete_retention(clock.now) == 0
    assert log.log_end_offset == 20 and log.log_start_offset == 0


def test_log_start_offset_survives_reopen_and_reads_below_it_fail(open_log, clock):
    log = open_log(segment_bytes=1024, retention_bytes=2000, retention_ms=-1)
    _fill(log, 40, ts0=clock.now, step=1)
    log.delete_retention(clock.now)
    start, end = log.log_start_offset, log.log_end_offset
    assert start > 0
    log.close()
    reopened = open_log(segment_bytes=1024, retention_bytes=2000, retention_ms=-1)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (start, end)
    assert reopened.read(start, 1).first_offset == start
    with pytest.raises(OffsetOutOfRangeError):
        reopened.read(start - 1, 1)
    assert reopened.offset_for_timestamp(0).offset == start


def test_appends_after_retention_continue_the_offsets(open_log, clock):
    log = open_log(segment_bytes=1024, retention_ms=1000)
    _fill(log, 30, ts0=clock.now - 10_000, step=1)
    end = log.log_end_offset
    log.delete_retention(clock.now)
    assert append(log, make_batch(2, ts=clock.now)).first_offset == end
