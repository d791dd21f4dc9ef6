"""Readers in other threads see a consistent prefix while the owner appends and deletes."""

from __future__ import annotations

import threading

from storage_helpers import append, headers_of, make_batch

from headwater.batch import decode_batches
from headwater.errors import OffsetOutOfRangeError
from services.broker.storage.leader_epoch import EpochEntry


def test_concurrent_reads_during_appends_rolls_and_retention(open_log, clock):
    log = open_log(segment_bytes=4096, retention_bytes=20_000, retention_ms=-1)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        try:
            while not stop.is_set():
                start = log.log_start_offset
                try:
                    s = log.read(start, 3000)
                except OffsetOutOfRangeError:
                    continue  # retention moved the start between the two calls
                if not s.data:
                    continue
                batches = decode_batches(s.data)  # whole batches, CRCs intact
                offsets = [o for b in batches for o in b.offsets().tolist()]
                assert offsets == list(range(s.first_offset, s.next_offset))
                reads[0] += 1
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(600):
            append(log, make_batch(3, value_size=40, tag=i))
            if i % 20 == 0:
                log.delete_retention(clock.now)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not errors, errors[0]
    assert reads[0] > 0
    assert log.log_start_offset > 0 and log.log_end_offset == 1800


def test_reader_holding_a_deleted_segment_keeps_reading(open_log, clock):
    log = open_log(segment_bytes=1024, retention_ms=0)
    for i in range(20):
        append(log, make_batch(3, ts=0, value_size=50, tag=i))
    snap = log._snap  # what a reader captured before retention ran
    seg = snap.segments[0]
    found = seg.find_position(0, snap.sealed_ends[0])
    assert found is not None
    log.delete_retention(clock.now)
    assert log.log_start_offset > 0 and not seg.log_path.exists()
    data = seg.read(found[0], snap.sealed_ends[0])
    assert decode_batches(data)[0].header.base_offset == 0


def test_an_uncontended_append_happens_now_a_contended_one_is_declined(open_log) -> None:
    """The event loop's small appends (Log.append_if_uncontended) never wait on the log lock
    another thread holds (a flush pass, the cleaner); a new leader epoch's entry is taken in
    memory (no file written: the flush pass writes it behind)."""
    log = open_log()
    buf = make_batch(2, tag=1)
    info = log.append_if_uncontended(buf, headers_of(buf), 0)  # epoch 0 is new here
    assert info is not None and log.log_end_offset == 2
    assert log.epochs.entries == [EpochEntry(0, 0)] and log.epochs.dirty
    buf = make_batch(2, tag=4)
    info = log.append_if_uncontended(buf, headers_of(buf), 0)
    assert info is not None and info.first_offset == 2 and log.log_end_offset == 4

    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with log._lock:  # what a flush pass or the cleaner does while it works
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert held.wait(10)
        buf = make_batch(1, tag=2)
        assert log.append_if_uncontended(buf, headers_of(buf), 0) is None
        assert log.log_end_offset == 4  # nothing written
        assert not log.assign_epoch_if_uncontended(1)
        assert log.end_offset_for_epoch_if_uncontended(0) is None
    finally:
        release.set()
        t.join(10)
    buf = make_batch(1, tag=3)
    info = log.append_if_uncontended(buf, headers_of(buf), 1)  # a new leader epoch
    assert info is not None and info.first_offset == 4
    assert log.epochs.entries == [EpochEntry(0, 0), EpochEntry(1, 4)]
    assert log.end_offset_for_epoch_if_uncontended(0) == (0, 4)
    assert log.assign_epoch_if_uncontended(2) and log.latest_epoch == 2
