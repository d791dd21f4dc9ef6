"""A segment's write-behind when the broker sets a page-cache window (off by default, then the
kernel alone writes back): writeback started as it grows and old pages dropped behind it.

The cache is only a copy, so what must hold is (1) the bytes read back are the bytes written,
also from ranges dropped from the cache; (2) the writeback ranges tile what was appended, in
steps of at least ``WRITEBACK_BYTES``; (3) only ranges more than ``PAGE_CACHE_WINDOW_BYTES``
behind the end are dropped, each once; (4) a log cut back below what was started or dropped
goes on from its new end; (5) an append never waits for the writeback thread, however long
a writeback takes, and what a segment queues while the thread is busy becomes one job. The
window and step are made small here so a test writes KiBs.
"""

from __future__ import annotations

import itertools
import os
import threading

import pytest
from storage_helpers import append, make_batch, read_all

from services.broker.__main__ import parse_args
from services.broker.storage import fileio, segment, writeback

pytestmark = pytest.mark.fast

STEP, WINDOW = 4096, 32 * 1024
DRAIN_S = 10.0


def drained() -> None:
    assert writeback.process_queue().drain(DRAIN_S), "the writeback thread did not finish"


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
    drained()
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
    drained()
    seg = log._segments[-1]
    cut = log.log_end_offset // 4
    log.truncate_to(cut)
    cut_size = seg.size
    assert calls["start"][-1][1] > cut_size, "the cut must reach below what was started"
    before = (len(calls["start"]), len(calls["drop"]))
    for i in range(80):
        append(log, make_batch(3, tag=100 + i, value_size=700))
    drained()
    new_starts = calls["start"][before[0] :]
    new_drops = calls["drop"][before[1] :]
    assert new_starts and new_starts[0][0] <= cut_size, "writeback goes on from the new end"
    assert _tiles(new_starts) and all(b - a >= STEP for a, b in new_starts)
    assert new_drops and new_drops[0][0] <= cut_size and _tiles(new_drops)
    assert len(read_all(log)) == seg.size


def test_by_default_the_kernel_writes_back_and_keeps_every_page(open_log, calls, monkeypatch):
    """Window 0 (the broker's default): no writeback is started and no page dropped; the
    kernel writes dirty pages back when it chooses and keeps them cached for readers behind
    the end, as with Kafka (started writeback took CPU and disk from bursts of appends:
    docs/benchmarks.md "Session 37")."""
    monkeypatch.setattr(segment, "PAGE_CACHE_WINDOW_BYTES", 0)
    log = open_log()
    for i in range(120):
        append(log, make_batch(3, tag=i, value_size=700))
    drained()
    assert log._segments[-1].size > 4 * WINDOW
    assert calls["start"] == [] and calls["drop"] == []
    assert len(read_all(log)) == log._segments[-1].size


def test_appends_never_wait_for_a_stalled_writeback(open_log, calls, monkeypatch) -> None:
    """The block layer can hold a writeback submission for a second (docs/benchmarks.md
    "Session 37"); appends go on meanwhile, and what they queue becomes one job that covers
    every range appended, run once the stalled call returns."""
    entered, release = threading.Event(), threading.Event()
    ranges: list[tuple[int, int]] = []

    def stalled(fd: int, offset: int, nbytes: int) -> bool:
        ranges.append((offset, offset + nbytes))
        entered.set()
        assert release.wait(DRAIN_S), "the test never released the writeback"
        return True

    monkeypatch.setattr(fileio, "start_writeback", stalled)
    log = open_log()
    try:
        i = 0
        while not entered.is_set():  # until the thread sits in a writeback
            append(log, make_batch(3, tag=i, value_size=700))
            i += 1
            assert i < 10_000, "no writeback was started"
        assert entered.wait(DRAIN_S)
        first = ranges[0]
        for j in range(40):  # ~10 steps more while the thread is held
            append(log, make_batch(3, tag=i + j, value_size=700))
        assert len(ranges) == 1, "nothing else ran while the thread was held"
    finally:
        release.set()
    drained()
    end = log._segments[-1].size
    assert len(ranges) == 2, "what was queued during the stall ran as one job"
    assert ranges[1][0] == first[1] and end - ranges[1][1] < STEP
    assert len(read_all(log)) == end


def test_a_job_writes_through_its_own_descriptor(tmp_path, monkeypatch) -> None:
    """A job holds a duplicate of the submitter's descriptor, so closing the segment's (a
    deleted segment) before the thread runs cannot point the writeback at another file; two
    submits while the job waits are one job with one duplicate, closed after it ran."""
    blocker_fd = os.open(tmp_path / "blocker.bin", os.O_RDWR | os.O_CREAT)
    fd = os.open(tmp_path / "f.bin", os.O_RDWR | os.O_CREAT)
    os.write(fd, b"x" * 8192)
    os.write(blocker_fd, b"y" * 4096)
    seen: list[tuple[int, int, int]] = []
    entered, gate = threading.Event(), threading.Event()
    real = fileio.start_writeback

    def start(fd_: int, offset: int, nbytes: int) -> bool:
        entered.set()
        assert gate.wait(DRAIN_S)
        seen.append((fd_, offset, nbytes))
        return real(fd_, offset, nbytes)

    monkeypatch.setattr(fileio, "start_writeback", start)
    q = writeback.WritebackQueue()
    try:
        q.submit("blocker", blocker_fd, (0, 4096))
        assert entered.wait(DRAIN_S)  # the thread is held inside the blocker's job
        q.submit("segment", fd, (0, 4096))
        q.submit("segment", fd, (4096, 8192))  # merged into the pending job
        os.close(fd)
    finally:
        gate.set()
    assert q.drain(DRAIN_S)
    os.close(blocker_fd)
    assert len(seen) == 2 and seen[1][1:] == (0, 8192)
    assert seen[1][0] != fd, "the job used its own duplicate"
    link = f"/proc/self/fd/{seen[1][0]}"  # and closed it (the number may serve another file)
    assert not (os.path.exists(link) and os.readlink(link) == str(tmp_path / "f.bin"))


def test_a_failing_job_leaves_the_thread_serving(tmp_path, monkeypatch, caplog) -> None:
    """A hint that raises is logged; the thread runs the next job and drain still ends."""
    fd = os.open(tmp_path / "f.bin", os.O_RDWR | os.O_CREAT)
    os.write(fd, b"x" * 8192)
    ran: list[tuple[int, int]] = []

    def start(fd_: int, offset: int, nbytes: int) -> bool:
        ran.append((offset, offset + nbytes))
        if len(ran) == 1:
            raise ValueError("a broken hint")
        return True

    monkeypatch.setattr(fileio, "start_writeback", start)
    q = writeback.WritebackQueue()
    try:
        q.submit("a", fd, (0, 4096))
        assert q.drain(DRAIN_S)
        q.submit("b", fd, (4096, 8192))
        assert q.drain(DRAIN_S)
    finally:
        os.close(fd)
    assert ran == [(0, 4096), (4096, 8192)]
    assert "segment writeback of a failed" in caplog.text


def test_the_broker_flag_sets_the_window_and_refuses_a_small_one(capsys) -> None:
    base = ["--broker-id", "1", "--data-dirs", "/tmp/hw-unused", "--etcd", "127.0.0.1:1"]
    assert parse_args(base).page_cache_window_bytes == 0
    settings = parse_args([*base, "--log-page-cache-window-bytes", str(256 << 20)])
    assert settings.page_cache_window_bytes == 256 << 20
    assert settings.registered_configs()["log.page.cache.window.bytes"] == str(256 << 20)
    with pytest.raises(SystemExit):
        parse_args([*base, "--log-page-cache-window-bytes", "4096"])
    assert "at least 67108864" in capsys.readouterr().err
