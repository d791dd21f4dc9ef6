"""Log append/read: offsets, byte identity, read limits, errors, rolls, timestamps."""

from __future__ import annotations

import struct
import threading

import pytest
from storage_helpers import append, headers_of, make_batch, read_all

from headwater.batch import TimestampType, decode_batches, encode_batch, parse_header
from headwater.config import TopicConfig
from headwater.errors import InvalidRequestError, KafkaStorageError, OffsetOutOfRangeError

pytestmark = pytest.mark.fast


def test_offsets_are_assigned_densely_across_appends(open_log):
    log = open_log()
    first = append(log, make_batch(3))
    second = append(log, make_batch(5) + make_batch(2))
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset, second.record_count) == (3, 9, 7)
    assert log.log_end_offset == 10
    assert [b.offsets().tolist() for b in decode_batches(read_all(log))] == [
        [0, 1, 2],
        [3, 4, 5, 6, 7],
        [8, 9],
    ]


def test_read_returns_the_appended_bytes_except_offset_and_epoch(open_log):
    log = open_log()
    sent = [make_batch(4, tag=i, value_size=50 + i) for i in range(20)]
    for b in sent:
        append(log, b, epoch=7)
    stored = read_all(log)
    expected = bytearray()
    offset = 0
    for b in sent:
        patched = bytearray(b)
        struct.pack_into("<q", patched, 0, offset)
        struct.pack_into("<i", patched, 12, 7)
        expected += patched
        offset += 4
    assert stored == bytes(expected)
    # and everything but those two fields is the producer's bytes, CRC included
    for batch, original in zip(decode_batches(stored), sent, strict=True):
        assert batch.raw[16:] == original[16:] and batch.raw[8:12] == original[8:12]
        assert batch.header.partition_leader_epoch == 7


def test_read_from_the_middle_of_a_batch_starts_with_that_batch(open_log):
    log = open_log(index_interval_bytes=0)
    for i in range(10):
        append(log, make_batch(5, tag=i))
    s = log.read(23, 1)
    assert (s.first_offset, s.next_offset) == (20, 25)
    assert parse_header(s.data).base_offset == 20


def test_read_gives_at_least_one_batch_and_respects_max_bytes(open_log):
    log = open_log()
    big = make_batch(10, value_size=1000)
    for _ in range(5):
        append(log, big)
    size = len(big)
    one = log.read(0, 10)  # far below one batch: still one whole batch
    assert len(one.data) == size and one.next_offset == 10
    two = log.read(0, 2 * size + size // 2)
    assert len(two.data) == 2 * size and two.next_offset == 20


def test_read_stops_before_max_offset(open_log):
    log = open_log()
    for i in range(6):
        append(log, make_batch(2, tag=i))
    s = log.read(0, 1 << 20, max_offset=6)
    assert (s.first_offset, s.next_offset) == (0, 6)
    assert log.read(6, 1 << 20, max_offset=6).data == b""
    assert log.read(7, 1 << 20, max_offset=6).data == b""


def test_read_at_log_end_is_empty_and_beyond_is_out_of_range(open_log):
    log = open_log()
    assert log.read(0, 100).data == b""
    append(log, make_batch(3))
    end = log.read(3, 100)
    assert (end.data, end.first_offset, end.next_offset) == (b"", 3, 3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_bad_append_changes_nothing(open_log):
    log = open_log()
    append(log, make_batch(2))
    b = make_batch(2)
    with pytest.raises(InvalidRequestError):
        log.append(b, [], 0)
    with pytest.raises(InvalidRequestError):
        log.append(b[:-8], headers_of(b), 0)  # header claims more than the buffer holds
    assert log.log_end_offset == 2 and log.size_in_bytes == len(b)


def test_roll_by_size(open_log):
    b = make_batch(5, value_size=100)
    log = open_log(segment_bytes=3 * len(b))
    for _ in range(10):
        append(log, b)
    # three batches fit a segment exactly; the fourth rolls
    assert log.segment_base_offsets() == [0, 15, 30, 45]
    assert log.size_in_bytes == 10 * len(b)
    assert len(decode_batches(read_all(log))) == 10
    sizes = [p.stat().st_size for p in sorted(log.dir.glob("*.log"))]
    assert sizes == [3 * len(b)] * 3 + [len(b)]


def test_a_batch_larger_than_segment_bytes_gets_a_segment_of_its_own(open_log):
    log = open_log(segment_bytes=1024)
    small, big = make_batch(1), make_batch(4, value_size=600)
    append(log, small)
    append(log, big)
    append(log, small)
    assert log.segment_base_offsets() == [0, 1, 5]


def test_roll_by_age_with_a_fake_clock(open_log, clock):
    log = open_log(segment_ms=60_000)
    append(log, make_batch(1))
    clock.advance(59_999)
    append(log, make_batch(1))
    assert log.num_segments == 1
    clock.advance(1)
    append(log, make_batch(1))
    assert log.segment_base_offsets() == [0, 2]
    clock.advance(10 * 60_000)  # an idle empty segment does not roll on its own
    assert log.num_segments == 2


def test_roll_when_the_offset_index_is_full(open_log):
    # 64-byte index = 8 entries; an entry for every batch but the first
    log = open_log(segment_index_bytes=64, index_interval_bytes=0)
    for i in range(20):
        append(log, make_batch(1, tag=i))
    bases = log.segment_base_offsets()
    assert bases == [0, 9, 18]
    assert len(decode_batches(read_all(log))) == 20


def test_offset_for_timestamp(open_log):
    t0 = 1_000_000
    log = open_log(segment_bytes=2048, index_interval_bytes=100)
    for i in range(50):
        append(log, make_batch(4, ts=t0 + 100 * i, tag=i))  # record j of batch i: t0+100i+j
    assert log.num_segments > 3
    m = log.offset_for_timestamp(0)
    assert (m.offset, m.timestamp) == (0, t0)
    m = log.offset_for_timestamp(t0 + 100 * 17 + 2)
    assert (m.offset, m.timestamp) == (17 * 4 + 2, t0 + 100 * 17 + 2)
    m = log.offset_for_timestamp(t0 + 100 * 30 + 50)  # between batches: the next record
    assert (m.offset, m.timestamp) == (31 * 4, t0 + 100 * 31)
    assert log.offset_for_timestamp(t0 + 100 * 49 + 4) is None


def test_offset_for_timestamp_with_out_of_order_batches(open_log):
    log = open_log(index_interval_bytes=0)
    for ts in [100, 500, 200, 300, 900, 400]:
        append(log, make_batch(1, ts=ts))
    assert log.offset_for_timestamp(250).offset == 1  # 500 comes first
    assert log.offset_for_timestamp(600).offset == 4


def test_log_append_time_stamps_batches(open_log, clock):
    log = open_log(message_timestamp_type="LogAppendTime")
    b = make_batch(3, ts=5)
    info = append(log, b)
    assert info.log_append_time == clock.now and info.max_timestamp == clock.now
    (batch,) = decode_batches(read_all(log))  # CRC verified
    assert batch.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.timestamps().tolist() == [clock.now] * 3
    assert batch.values() == [f"0:{i}".encode().ljust(10, b"x") for i in range(3)]
    assert append(log, b, epoch=1).log_append_time == clock.now
    assert log.append(b, headers_of(b), 1, log_append_time=42).max_timestamp == 42


def test_create_time_keeps_producer_timestamps(open_log):
    log = open_log()
    info = append(log, make_batch(3, ts=5))
    assert info.log_append_time == -1 and info.max_timestamp == 7


def test_truncate_to_removes_whole_batches_and_appends_continue(open_log):
    log = open_log(segment_bytes=1024)
    for i in range(30):
        append(log, make_batch(3, tag=i))
    assert log.num_segments > 2
    log.truncate_to(40)  # inside batch [39, 41]: that batch goes too
    assert log.log_end_offset == 39
    assert decode_batches(read_all(log))[-1].header.last_offset == 38
    assert append(log, make_batch(2)).first_offset == 39
    log.close()
    assert open_log(segment_bytes=1024).log_end_offset == 41


def test_truncate_fully_and_start_at(open_log):
    log = open_log()
    for i in range(5):
        append(log, make_batch(2, tag=i))
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.size_in_bytes) == (1000, 1000, 0)
    assert append(log, make_batch(2)).first_offset == 1000
    log.close()
    reopened = open_log()
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1002)


def test_config_update_applies_to_next_append(open_log):
    log = open_log()
    for _ in range(3):
        append(log, make_batch(5, value_size=300))
    log.update_config(TopicConfig(segment_bytes=1024))
    append(log, make_batch(1))
    assert log.num_segments == 2


def test_flush_messages_policy(open_log):
    log = open_log(flush_messages=5)
    append(log, make_batch(3))
    assert log.recovery_point == 0
    append(log, make_batch(3))
    assert log.recovery_point == 6


def test_flush_ms_policy_and_sealed_segments(open_log, clock):
    log = open_log(flush_ms=1000, segment_bytes=1024)
    for i in range(10):
        append(log, make_batch(4, value_size=100, tag=i))
    assert log.num_segments > 1 and log.recovery_point == 0
    assert log.maybe_flush(clock.now) is False  # too early for the active one
    assert log.recovery_point == log.segment_base_offsets()[-1]  # sealed ones were synced
    clock.advance(1000)
    assert log.maybe_flush(clock.now) is True
    assert log.recovery_point == log.log_end_offset


def _hold_sealed_fsyncs(log, monkeypatch):
    """Make the fsync of ``log``'s sealed segments wait for the returned ``release`` event
    (``entered`` is set when one starts)."""
    from services.broker.storage.segment import LogSegment

    sealed_bases = set(log.segment_base_offsets()[:-1])
    entered, release = threading.Event(), threading.Event()
    real_flush = LogSegment.flush

    def held_flush(seg: LogSegment) -> None:
        if seg.base_offset in sealed_bases:
            entered.set()
            assert release.wait(10), "the test never released the fsync"
        real_flush(seg)

    monkeypatch.setattr(LogSegment, "flush", held_flush)
    return entered, release


def test_a_sealed_segment_is_fsynced_while_appends_go_on(open_log, clock, monkeypatch):
    """The flush pass fsyncs sealed segments without the log's lock (a sealed GiB can take
    seconds; Kafka flushes after a roll outside its lock too): appends go on meanwhile, and
    the recovery point moves only once the sealed segments are on disk."""
    log = open_log(segment_bytes=1024)
    for i in range(6):
        append(log, make_batch(4, value_size=100, tag=i))
    assert log.num_segments > 1 and log.recovery_point == 0
    active_base = log.segment_base_offsets()[-1]
    entered, release = _hold_sealed_fsyncs(log, monkeypatch)
    flusher = threading.Thread(target=log.maybe_flush, args=(clock.now,))
    flusher.start()
    try:
        assert entered.wait(10), "the flush pass did not fsync the sealed segments"
        end = log.log_end_offset
        info = append(log, make_batch(2, value_size=100, tag=99))  # not held by the fsync
        assert info.first_offset == end
        assert log.recovery_point == 0, "nothing is durable before the fsync returns"
    finally:
        release.set()
        flusher.join(10)
    assert not flusher.is_alive()
    assert log.recovery_point == active_base


def test_a_segment_cut_back_and_sealed_again_during_the_fsync_stays_unflushed(
    open_log, clock, monkeypatch
):
    """A follower's truncation into a sealed segment while its fsync runs, then appends
    that seal it again: the fsync did not cover the new bytes, so the segment stays in the
    list and the recovery point does not move past it."""
    log = open_log(segment_bytes=1024)
    for i in range(6):
        append(log, make_batch(4, value_size=100, tag=i))
    bases = log.segment_base_offsets()
    assert len(bases) >= 3
    entered, release = _hold_sealed_fsyncs(log, monkeypatch)
    flusher = threading.Thread(target=log.maybe_flush, args=(clock.now,))
    flusher.start()
    try:
        assert entered.wait(10), "the flush pass did not fsync the sealed segments"
        log.truncate_to(bases[1] + 1)  # the second segment becomes the active one again
        again = log._segments[-1]
        assert again.base_offset == bases[1]
        while log._segments[-1] is again:  # new bytes, until it is sealed again
            append(log, make_batch(4, value_size=100, tag=50))
    finally:
        release.set()
        flusher.join(10)
    assert not flusher.is_alive()
    assert again in log._sealed_unflushed, "its new bytes were never fsynced"
    assert log.recovery_point <= again.base_offset


def test_close_waits_for_a_sealed_segment_fsync(open_log, clock, monkeypatch):
    """``close`` closes the descriptors the fsync outside the lock uses: it waits for it."""
    log = open_log(segment_bytes=1024)
    for i in range(6):
        append(log, make_batch(4, value_size=100, tag=i))
    end = log.log_end_offset
    entered, release = _hold_sealed_fsyncs(log, monkeypatch)
    errors: list[Exception] = []

    def flush() -> None:
        try:
            log.maybe_flush(clock.now)
        except KafkaStorageError as exc:  # closed after its fsync: the pass skips the log
            errors.append(exc)

    flusher = threading.Thread(target=flush)
    closer = threading.Thread(target=log.close)
    flusher.start()
    try:
        assert entered.wait(10), "the flush pass did not fsync the sealed segments"
        closer.start()
        closer.join(0.2)
        assert closer.is_alive(), "close must wait for the fsync outside the lock"
    finally:
        release.set()
        flusher.join(10)
        closer.join(10)
    assert not flusher.is_alive() and not closer.is_alive()
    assert all("is closed" in str(e) for e in errors)
    assert open_log().log_end_offset == end


def test_compressed_batches_are_stored_as_sent(open_log):
    log = open_log()
    b = encode_batch([b"a" * 1000] * 10, compression_type="zstd", timestamps=1)
    append(log, b)
    (batch,) = decode_batches(read_all(log))
    assert batch.raw[16:] == b[16:] and batch.values() == [b"a" * 1000] * 10


def test_an_idle_flush_pass_does_not_take_the_log_lock(open_log, clock):
    """The periodic pass visits every log every second: one with nothing to flush and its
    checkpoint as written is passed over without its lock (issue 17 item 4: idle CPU)."""
    log = open_log(flush_ms=1000)
    append(log, make_batch(1))

    class Counting:
        def __init__(self, lock):
            self.lock, self.n = lock, 0

        def __enter__(self):
            self.n += 1
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    log._lock = counting = Counting(log._lock)
    assert log.maybe_flush(clock.now) is False  # an append not yet flush.ms old: locked pass
    clock.advance(1000)
    assert log.maybe_flush(clock.now) is True
    n = counting.n
    assert log.maybe_flush(clock.now) is False  # nothing to do: no lock taken
    assert counting.n == n
    log._lock = counting.lock
