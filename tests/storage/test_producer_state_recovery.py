"""Producer snapshots, rebuild at open, truncation and retention of producer state."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from storage_helpers import FakeClock, append, make_batch
from test_producer_state import marker, pbatch

from services.broker.storage import producer_snapshot
from services.broker.storage.log import Log

pytestmark = pytest.mark.fast

OpenLog = Callable[..., Log]


def _snapshots(log: Log) -> list[int]:
    return producer_snapshot.offsets(log.dir)


def _fill(log: Log, pid: int, batches: int, *, start_seq: int = 0) -> None:
    for i in range(batches):
        append(log, pbatch(pid, 0, start_seq + 2 * i, n=2))


def test_snapshot_at_roll_is_used_at_reopen(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=1024)
    _fill(log, 1, 30)
    bases = log.segment_base_offsets()
    assert len(bases) > 2
    assert _snapshots(log) == bases[1:]  # one per roll, at the new segment's base
    first_in_active = log.read(bases[-1], 1 << 20)
    after = log.log_end_offset - bases[-1]  # 2 records per batch
    before = log.producer_entry(1)
    log.close(mark_clean=False)  # a crash: no snapshot at the end
    again = open_log(segment_bytes=1024)
    assert again.producer_snapshot_offset == bases[-1]
    assert again.producer_replayed_batches == after // 2
    assert first_in_active.data
    assert again.producer_entry(1) == before
    # a retried batch is still recognised after the restart, with its original offsets
    dup = append(again, pbatch(1, 0, 56, n=2))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (56, 57)


def test_clean_close_snapshot_at_log_end_means_no_replay(open_log: OpenLog) -> None:
    log = open_log()
    _fill(log, 1, 3)
    append(log, pbatch(2, 0, 0, txn=True))
    end = log.log_end_offset
    log.close()
    again = open_log()
    assert again.producer_snapshot_offset == end
    assert again.producer_replayed_batches == 0
    assert again.first_unstable_offset == 6
    assert again.producer_entry(1).last_seq == 5  # type: ignore[union-attr]


def test_corrupt_or_torn_snapshot_falls_back_to_older(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=1024)
    _fill(log, 1, 30)
    want = log.producer_entry(1)
    snaps = _snapshots(log)
    log.close(mark_clean=False)
    newest = producer_snapshot.path_for(log.dir, snaps[-1])
    raw = bytearray(newest.read_bytes())
    raw[30] ^= 0xFF
    newest.write_bytes(bytes(raw))
    torn = producer_snapshot.path_for(log.dir, snaps[-2])
    torn.write_bytes(torn.read_bytes()[:40])
    again = open_log(segment_bytes=1024)
    assert again.producer_snapshot_offset == snaps[-3]
    assert not newest.exists() and not torn.exists()
    assert again.producer_entry(1) == want
    again.close(mark_clean=False)
    for off in _snapshots(again):
        producer_snapshot.path_for(log.dir, off).unlink()
    third = open_log(segment_bytes=1024)
    assert third.producer_snapshot_offset is None
    assert third.producer_replayed_batches == 30
    assert third.producer_entry(1) == want


def test_txn_index_rebuilt_when_lost(open_log: OpenLog) -> None:
    log = open_log()
    append(log, pbatch(1, 0, 0, txn=True))
    marker(log, 1, 1, commit=False)
    log.close(mark_clean=False)
    for f in log.dir.glob("*.txnindex"):
        f.unlink()
    for f in log.dir.glob("*.snapshot"):
        f.unlink()
    again = open_log()
    assert again.aborted_transactions(0, 10) == [(1, 0)]
    assert len(list(log.dir.glob("*.txnindex"))) == 1


def test_truncation_below_txn_reopens_and_removes_state(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=1024)
    _fill(log, 1, 20)  # offsets 0-39, rolls a few times
    append(log, pbatch(2, 0, 0, txn=True))  # 40-41 opens txn
    append(log, pbatch(2, 0, 2, txn=True))  # 42-43
    marker(log, 2, 1, commit=False)  # 44 aborts [40, 44]
    append(log, pbatch(3, 0, 0, txn=True))  # 45-46
    assert log.first_unstable_offset == 45
    assert log.aborted_transactions(0, 100) == [(2, 40)]
    log.truncate_to(44)  # the ABORT goes: pid 2's txn is open again
    assert log.first_unstable_offset == 40
    assert log.aborted_transactions(0, 100) == []
    assert log.producer_entry(3) is None
    e2 = log.producer_entry(2)
    assert e2 is not None and e2.epoch == 0 and e2.last_seq == 3
    assert all(off <= 44 for off in _snapshots(log))
    log.truncate_to(40)  # below the txn: gone
    assert log.first_unstable_offset is None and log.producer_entry(2) is None
    assert log.producer_entry(1).last_seq == 39  # type: ignore[union-attr]
    append(log, pbatch(2, 0, 0, txn=True))  # pid 2 restarts at 0 without error
    log.truncate_fully_and_start_at(100)
    assert log.producer_entry(1) is None and log.first_unstable_offset is None
    assert _snapshots(log) == []


def test_aborted_transactions_range_queries(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=1024)
    expected = []
    for k in range(6):
        pid = 10 + k
        first = log.log_end_offset
        append(log, pbatch(pid, 0, 0, txn=True))
        append(log, make_batch(4))
        marker(log, pid, 1, commit=k % 2 == 1)
        if k % 2 == 0:
            expected.append((pid, first, log.log_end_offset - 1))
    assert len(log.segment_base_offsets()) > 1
    assert log.aborted_transactions(0, log.log_end_offset) == [(p, f) for p, f, _ in expected]
    (p0, f0, l0), (p1, f1, l1), (p2, f2, _) = expected
    assert log.aborted_transactions(l0 + 1, f1 - 1) == []
    assert log.aborted_transactions(l0, l0) == [(p0, f0)]
    assert log.aborted_transactions(f1, f2) == [(p1, f1), (p2, f2)]
    assert log.aborted_transactions(l1 + 1, 10_000) == [(p2, f2)]


def test_overlapping_aborts_listed_by_first_offset(open_log: OpenLog) -> None:
    log = open_log()
    append(log, pbatch(1, 0, 0, txn=True))  # 0-1
    append(log, pbatch(2, 0, 0, txn=True))  # 2-3
    marker(log, 2, 1, commit=False)  # 4
    marker(log, 1, 1, commit=False)  # 5
    assert log.aborted_transactions(0, 10) == [(1, 0), (2, 2)]
    assert log.aborted_transactions(5, 5) == [(1, 0)]
    assert log.aborted_transactions(0, 1) == [(1, 0)]


def test_retention_keeps_newest_snapshot_and_drops_txn_indexes(
    open_log: OpenLog, clock: FakeClock
) -> None:
    log = open_log(segment_bytes=1024, retention_ms=10_000)
    for k in range(8):
        append(log, pbatch(k, 0, 0, txn=True))
        marker(log, k, 1, commit=False)
        _fill(log, 100 + k, 3)
    assert len(list(log.dir.glob("*.txnindex"))) > 2
    before = _snapshots(log)
    clock.advance(1_000_000)
    append(log, make_batch(1, ts=clock.now))  # a fresh record keeps the active segment
    removed = log.delete_retention(clock.now)
    assert removed >= 2
    start = log.log_start_offset
    snaps = _snapshots(log)
    assert len([s for s in before if s < start]) > 1
    assert [s for s in snaps if s < start] == [max(s for s in before if s < start)]
    assert [s for s in snaps if s >= start] == [s for s in before if s >= start]
    kept_bases = set(log.segment_base_offsets())
    for f in log.dir.glob("*.txnindex"):
        assert int(f.stem) in kept_bases
    pids = [pid for pid, _ in log.aborted_transactions(0, 10_000)]
    assert 0 < len(pids) < 8 and pids == list(range(8 - len(pids), 8))
    assert log.producer_entry(100) is not None  # state itself is kept
