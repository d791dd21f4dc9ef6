"""A segment's write-behind: writeback started as it grows and, when the broker sets a
page-cache window (off by default), old pages dropped behind it.

The cache is only a copy, so what must hold is (1) the bytes read back are the bytes written,
also from ranges dropped from the cache; (2) the writeback ranges tile what was appended, in
steps of at least ``WRITEBACK_BYTES``; (3) only ranges more than ``PAGE_CACHE_WINDOW_BYTES``
behind the end are dropped, each once; (4) a log cut back below what was started or dropped
goes on from its new end. The window and step are made small here so a test writes KiBs.
"""

from __future__ import annotations

import itertools
import os

import pytest
from storage_helpers import append, make_batch, read_all

from services.broker.__main__ import parse_args
from services.broker.storage import fileio, segment

pytestmark = pytest.mark.fast

STEP, WINDOW = 4096, 32 * 1024


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[int, int]]]:
    seen: dict[str, list[tuple[int, int]]] = {"start": [], "drop": []}
    real_start, real_drop = fileio.start_writeback, fileio.drop_cached

    def start(fd: int, offset: int, nbytes: int) -> bool:
        seen["start"].append((offset, offset + nbytes))
        return real_start(fd, offset, nbytes)

    def drop(fd: int, offset: int, nbytes: int) -> bool:
        seen["drop"].append((offset, offset + nbytes))
        return real_drop(fd, offset, nbytes)

    monkeypatch.setattr(segment, "WRITEBACK_BYTES", STEP)
    monkeypatch.setattr(segment, "PAGE_CACHE_WINDOW_BYTES", WINDOW)
    monkeypatch.setattr(fileio, "start_writeback", start)
    monkeypatch.setattr(fileio, "drop_cached", drop)
    return seen


def _tiles(ranges: list[tuple[int, int]]) -> bool:
    return all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


def test_ranges_tile_the_log_and_drops_stay_behind_the_window(open_log, calls) -> None:
    log = open_log()
    batches = [make_batch(3, tag=i, value_size=700) for i in range(120)]
    for b in batches:
        append(log, b)
    end = log._segments[-1].size
    starts, drops = calls["start"], calls["drop"]
    assert starts and drops, "a log this long must start writeback and drop old pages"
    assert starts[0][0] == 0 and _tiles(starts) and starts[-1][1] <= end
    assert all(b - a >= STEP for a, b in starts)
    assert drops[0][0] == 0 and _tiles(drops)
    assert all(b - a >= 4 * STEP for a, b in drops)
    assert drops[-1][1] <= end - WINDOW, "nothing inside the window is dropped"
    assert end - drops[-1][1] < WINDOW + 4 * STEP + 4096, "the window does not grow unbounded"
    assert len(read_all(log)) == end  # the dropped ranges read back from the file


def test_bytes_read_back_equal_after_the_pages_were_dropped(tmp_path) -> None:
    path = tmp_path / "f.bin"
    data = os.urandom(1 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, data)
        assert fileio.start_writeback(fd, 0, len(data)) is True  # Linux: the call exists
        assert fileio.drop_cached(fd, 0, len(data)) is True
        assert os.pread(fd, len(data), 0) == data
        assert fileio.start_writeback(fd, 0, 0) is False  # nothing to do is not an error
    finally:
        os.close(fd)


def test_a_log_cut_back_goes_on_from_its_new_end(open_log, calls) -> None:
    log = open_log()
    for i in range(80):
        append(log, make_batch(3, tag=i, value_size=700))
    seg = log._segments[-1]
    cut = log.log_end_offset // 4
    log.truncate_to(cut)
    cut_size = seg.size
    assert calls["start"][-1][1] > cut_size, "the cut must reach below what was started"
    before = (len(calls["start"]), len(calls["drop"]))
    for i in range(80):
        append(log, make_batch(3, tag=100 + i, value_size=700))
    new_starts = calls["start"][before[0] :]
    new_drops = calls["drop"][before[1] :]
    assert new_starts and new_starts[0][0] <= cut_size, "writeback goes on from the new end"
    assert _tiles(new_starts) and all(b - a >= STEP for a, b in new_starts)
    assert new_drops and new_drops[0][0] <= cut_size and _tiles(new_drops)
    assert len(read_all(log)) == seg.size


def test_by_default_no_page_is_dropped(open_log, calls, monkeypatch) -> None:
    """Window 0 (the broker's default): writeback is still started, but every page stays
    in the kernel's page cache for readers behind the end, as with Kafka."""
    monkeypatch.setattr(segment, "PAGE_CACHE_WINDOW_BYTES", 0)
    log = open_log()
    for i in range(120):
        append(log, make_batch(3, tag=i, value_size=700))
    assert log._segments[-1].size > 4 * WINDOW
    assert calls["start"] and _tiles(calls["start"])
    assert calls["drop"] == []


def test_the_broker_flag_sets_the_window_and_refuses_a_small_one(capsys) -> None:
    base = ["--broker-id", "1", "--data-dirs", "/tmp/hw-unused", "--etcd", "127.0.0.1:1"]
    assert parse_args(base).page_cache_window_bytes == 0
    settings = parse_args([*base, "--log-page-cache-window-bytes", str(256 << 20)])
    assert settings.page_cache_window_bytes == 256 << 20
    assert settings.registered_configs()["log.page.cache.window.bytes"] == str(256 << 20)
    with pytest.raises(SystemExit):
        parse_args([*base, "--log-page-cache-window-bytes", "4096"])
    assert "at least 67108864" in capsys.readouterr().err
