"""Storage-level log compaction: what survives, offsets, tombstones, lags, dirty ratio."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from compaction_helpers import FakeClock, latest, put, records

from headwater.batch import decode_batches
from headwater.batch.layout import Compression
from services.broker.storage import cleaner, offset_map
from services.broker.storage.log import Log

pytestmark = pytest.mark.fast

DAY = 24 * 3600 * 1000


def fill(
    log: Log, clock: FakeClock, n_keys: int, updates: int, seed: int = 1
) -> dict[bytes, bytes]:
    """``updates`` random updates over ``n_keys`` keys, 5 per batch; returns the expected
    latest value of every key."""
    rnd = random.Random(seed)
    expect: dict[bytes, bytes] = {}
    for u in range(0, updates, 5):
        items = []
        for j in range(5):
            k = f"k{rnd.randrange(n_keys):04d}".encode()
            v = f"v{u + j}".encode().ljust(40, b".")
            items.append((k, v))
            expect[k] = v
        put(log, items, ts=clock.now)
        clock.advance(1)
    return expect


def test_latest_value_per_key_survives_across_segments(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    log = open_log()
    expect = fill(log, clock, n_keys=50, updates=2000)
    before = latest(log)
    segs_before, size_before = log.num_segments, log.size_in_bytes
    assert segs_before > 10
    res = cleaner.clean_log(log, clock.now)
    assert res is not None and res.records_removed > 0
    after = records(log)
    # exactly one record per key outside the active segment, and every latest value present
    assert {k: v for _, k, v in after} == expect
    assert latest(log) == before  # same offsets too
    offs = [o for o, _, _ in after]
    assert offs == sorted(offs) and len(set(offs)) == len(offs)
    active_base = log.segment_base_offsets()[-1]
    cleaned_keys = [k for o, k, _ in after if o < active_base]
    assert len(cleaned_keys) == len(set(cleaned_keys))
    assert log.size_in_bytes < size_before / 4
    assert offset_map.read_first_dirty(log.dir) == res.plan.end == active_base
    # groups are formed from sizes before cleaning: the next pass merges the small segments
    put(log, [(b"k0000", b"last")], ts=clock.now)
    log.roll()
    assert cleaner.clean_log(log, clock.now) is not None
    assert log.num_segments < segs_before / 4
    assert {k: v for _, k, v in records(log)} == {**expect, b"k0000": b"last"}


def test_offsets_unchanged_and_reads_from_any_offset(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    log = open_log()
    fill(log, clock, n_keys=20, updates=800)
    original = {o: (k, v) for o, k, v in records(log)}
    cleaner.clean_log(log, clock.now)
    kept = records(log)
    for o, k, v in kept:
        assert original[o] == (k, v)  # every surviving record keeps its offset
    kept_offsets = [o for o, _, _ in kept]
    # reading from any offset (including inside removed ranges) yields the next survivor
    for start in range(0, log.log_end_offset, 7):
        got = records(log, start)
        want = [r for r in kept if r[0] >= start]
        assert got == want
        s = log.read(start, 1)
        if want:
            assert s.first_offset <= want[0][0] < s.next_offset
    assert kept_offsets[-1] == log.log_end_offset - 1


def test_tombstones_kept_until_delete_retention_then_removed(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    log = open_log(delete_retention_ms=DAY)
    for i in range(40):
        put(log, [(f"k{i % 8}".encode(), b"x" * 200)], ts=clock.now)
    tomb = put(log, [(b"k3", None)], ts=clock.now).first_offset
    for i in range(40):
        put(log, [(f"j{i % 8}".encode(), b"y" * 200)], ts=clock.now)
    log.roll()
    cleaner.clean_log(log, clock.now)
    # first pass: the tombstone is the latest of its key: kept, the older k3 values gone
    k3 = [(o, v) for o, k, v in records(log) if k == b"k3"]
    assert k3 == [(tomb, None)]
    # a later pass before delete.retention.ms: still kept
    clock.advance(DAY // 2)
    put(log, [(b"j0", b"z")], ts=clock.now)
    log.roll()
    assert cleaner.clean_log(log, clock.now) is not None
    assert [(o, v) for o, k, v in records(log) if k == b"k3"] == [(tomb, None)]
    # once the tombstone's segment is older than delete.retention.ms: removed
    clock.advance(DAY)
    put(log, [(b"j1", b"z")], ts=clock.now)
    log.roll()
    assert cleaner.clean_log(log, clock.now) is not None
    assert [o for o, k, _ in records(log) if k == b"k3"] == []
    assert latest(log)[b"j1"][1] == b"z"
    assert {k for _, k, _ in records(log)} == {f"k{i}".encode() for i in range(8) if i != 3} | {
        f"j{i}".encode() for i in range(8)
    }


def test_min_compaction_lag_respected(open_log: Callable[..., Log], clock: FakeClock) -> None:
    log = open_log(min_compaction_lag_ms=60_000)
    fill(log, clock, n_keys=5, updates=400)
    log.roll()
    before = records(log)
    assert cleaner.clean_log(log, clock.now) is None  # every record younger than the lag
    assert records(log) == before
    clock.advance(60_000 + 1000)
    fresh = fill(log, clock, n_keys=5, updates=400, seed=2)  # new, young records
    log.roll()
    young_start = [o for o, _, _ in before][-1] + 1
    res = cleaner.clean_log(log, clock.now)
    assert res is not None and res.plan.end <= young_start
    after = records(log)
    # every young record is untouched; the old section has one record per key
    assert [r for r in after if r[0] >= young_start] == [
        r for r in records(log) if r[0] >= young_start
    ]
    young = [r for r in after if r[0] >= young_start]
    assert len(young) == 400 and {k: v for _, k, v in young} == fresh
    old_keys = [k for o, k, _ in after if o < res.plan.end]
    assert len(old_keys) == len(set(old_keys))


def test_min_cleanable_dirty_ratio_respected(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    log = open_log(min_cleanable_dirty_ratio=0.6)
    fill(log, clock, n_keys=10, updates=600)
    log.roll()
    assert cleaner.clean_log(log, clock.now) is not None  # all dirty: ratio 1
    clean_size = log.size_in_bytes
    # a little new dirty data: ratio below 0.6 -> no pass
    fill(log, clock, n_keys=10, updates=5, seed=3)
    log.roll()
    p = cleaner.plan(log, clock.now)
    assert p is None
    snapshot = records(log)
    assert cleaner.clean_log(log, clock.now) is None and records(log) == snapshot
    # ... unless the oldest dirty record is older than max.compaction.lag.ms
    log.update_config(
        log.config.__class__(**{**log.config.__dict__, "max_compaction_lag_ms": 1000})
    )
    clock.advance(2000)
    assert cleaner.clean_log(log, clock.now) is not None
    assert log.size_in_bytes <= clean_size + 200


def test_active_segment_never_touched(open_log: Callable[..., Log], clock: FakeClock) -> None:
    log = open_log(segment_bytes=1 << 20)  # everything in the active segment
    fill(log, clock, n_keys=3, updates=200)
    before = records(log)
    assert log.num_segments == 1
    assert cleaner.clean_log(log, clock.now) is None
    assert records(log) == before
    log2_items = len(before)
    assert log2_items == 200


def test_compressed_batches_reencoded_with_same_codec(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    log = open_log()
    for i in range(60):
        put(
            log,
            [(b"a", f"a{i}".encode() * 20), (f"u{i}".encode(), b"keep" * 20)],
            ts=clock.now,
            codec=Compression.ZSTD,
        )
    log.roll()
    cleaner.clean_log(log, clock.now)
    pos, seen = 0, 0
    while pos < log.log_end_offset:
        s = log.read(pos, 1 << 20)
        for b in decode_batches(s.data):
            assert b.header.compression == Compression.ZSTD
            seen += len(b)
        pos = s.next_offset
    assert seen == 61  # 60 unique keys + the last "a"
    assert latest(log)[b"a"][1] == b"a59" * 20


def test_null_keys_dropped_and_delete_policy_untouched(
    open_log: Callable[..., Log], clock: FakeClock
) -> None:
    log = open_log()
    for i in range(50):
        put(log, [(None, b"n" * 100), (b"k", f"{i}".encode())], ts=clock.now)
    log.roll()
    cleaner.clean_log(log, clock.now)
    assert [(k, v) for _, k, v in records(log)] == [(b"k", b"49")]
    log.close()
    plain = open_log(cleanup_policy="delete")
    assert cleaner.plan(plain, clock.now) is None


@pytest.mark.parametrize("policy", ["compact,delete", "delete,compact"])
def test_compact_and_delete_both_apply(
    open_log: Callable[..., Log], clock: FakeClock, policy: str
) -> None:
    from headwater.config import resolve_topic_config

    cfg = resolve_topic_config({"cleanup.policy": policy, "retention.ms": "1000"})
    assert cfg.compact_enabled and cfg.delete_enabled
    log = open_log(cleanup_policy=cfg.cleanup_policy, retention_ms=1000)
    fill(log, clock, n_keys=5, updates=300)
    log.roll()
    assert cleaner.clean_log(log, clock.now) is not None
    clock.advance(5000)
    put(log, [(b"new", b"1")], ts=clock.now)
    assert log.delete_retention(clock.now) > 0
    assert records(log) == [(log.log_end_offset - 1, b"new", b"1")]
