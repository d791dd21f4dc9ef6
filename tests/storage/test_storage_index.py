"""OffsetIndex and TimeIndex: lookups, file format, load checks."""

from __future__ import annotations

import struct

import pytest

from services.broker.storage.offset_index import OffsetIndex
from services.broker.storage.time_index import TimeIndex

pytestmark = pytest.mark.fast


def test_offset_index_lookup_returns_largest_entry_at_or_below(tmp_path):
    idx = OffsetIndex(tmp_path / "x.index", 1000, 1024)
    idx.append_many([(1010, 100), (1020, 250), (1035, 400)])
    assert idx.lookup(999) == (1000, 0)
    assert idx.lookup(1009) == (1000, 0)
    assert idx.lookup(1010) == (1010, 100)
    assert idx.lookup(1034) == (1020, 250)
    assert idx.lookup(10**9) == (1035, 400)
    # file: 8-byte little-endian (relative offset, position) entries
    assert (tmp_path / "x.index").read_bytes() == b"".join(
        struct.pack("<II", r, p) for r, p in [(10, 100), (20, 250), (35, 400)]
    )
    idx.close()


def test_offset_index_rejects_out_of_order_entries(tmp_path):
    idx = OffsetIndex(tmp_path / "x.index", 0, 1024)
    idx.append_many([(10, 100)])
    with pytest.raises(ValueError):
        idx.append_many([(10, 200)])
    with pytest.raises(ValueError):
        idx.append_many([(11, 100)])
    idx.close()


def test_offset_index_load_and_checks(tmp_path):
    path = tmp_path / "x.index"
    idx = OffsetIndex(path, 50, 1024)
    idx.append_many([(60, 100), (70, 200)])
    idx.truncate_to_offset(70)
    assert len(idx) == 1 and path.stat().st_size == 8
    idx.close()
    again = OffsetIndex(path, 50, 1024)
    assert again.load(log_size=1000) and again.lookup(75) == (60, 100)
    assert not again.load(log_size=100)  # points at or past the end of the log
    again.close()
    path.write_bytes(struct.pack("<II", 5, 0))  # first entry at position 0: never written
    bad = OffsetIndex(path, 50, 1024)
    assert not bad.load(log_size=1000) and len(bad) == 0
    bad.close()
    path.write_bytes(struct.pack("<IIII", 9, 100, 4, 200))  # offsets decrease
    bad = OffsetIndex(path, 50, 1024)
    assert not bad.load(log_size=1000)
    bad.close()


def test_offset_index_is_full(tmp_path):
    idx = OffsetIndex(tmp_path / "x.index", 0, 24)  # 3 entries
    idx.append_many([(1, 10), (2, 20)])
    assert not idx.is_full
    idx.append_many([(3, 30)])
    assert idx.is_full
    idx.close()


def test_time_index_only_appends_a_growing_maximum_and_looks_up(tmp_path):
    path = tmp_path / "x.timeindex"
    idx = TimeIndex(path, 100, 1024)
    idx.maybe_append_many([(500, 100), (500, 110), (400, 120), (700, 130), (900, 150)])
    assert len(idx) == 3 and idx.max_timestamp == 900
    assert path.read_bytes() == b"".join(
        struct.pack("<qI", t, r) for t, r in [(500, 0), (700, 30), (900, 50)]
    )
    # offset of the last entry whose timestamp is below t: the scan for t starts there
    assert idx.lookup_before(100) == 100
    assert idx.lookup_before(500) == 100
    assert idx.lookup_before(501) == 100
    assert idx.lookup_before(701) == 130
    assert idx.lookup_before(10**12) == 150
    idx.close()
    again = TimeIndex(path, 100, 1024)
    assert again.load(max_offset=150) and again.last_entry() == (900, 150)
    assert not again.load(max_offset=149)
    again.close()


def test_time_index_load_rejects_garbage(tmp_path):
    path = tmp_path / "x.timeindex"
    path.write_bytes(struct.pack("<qIqI", 900, 1, 800, 2))  # timestamps decrease
    idx = TimeIndex(path, 0, 1024)
    assert not idx.load(None) and len(idx) == 0
    idx.close()
    path.write_bytes(b"\x00" * 13)
    idx = TimeIndex(path, 0, 1024)
    assert not idx.load(None)
    idx.close()
