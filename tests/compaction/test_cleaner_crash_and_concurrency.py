"""Compaction under failure and concurrency: a crash at every step of the swap loses
nothing; readers running during cleaning always see correct data; followers copy gaps."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from compaction_helpers import FakeClock, latest, put, records

from headwater.batch.codec import iter_headers
from headwater.config import TopicConfig
from services.broker.storage import cleaner, swap
from services.broker.storage.log import Log


class Crash(Exception):
    pass


def fill(log: Log, clock: FakeClock, n_keys: int = 30, updates: int = 900) -> dict[bytes, bytes]:
    rnd = random.Random(7)
    expect: dict[bytes, bytes] = {}
    for u in range(0, updates, 3):
        items = []
        for j in range(3):
            k = f"k{rnd.randrange(n_keys):03d}".encode()
            v = f"v{u + j}".encode().ljust(60, b"-")
            items.append((k, v))
            expect[k] = v
        put(log, items, ts=clock.now)
        clock.advance(1)
    log.roll()
    return expect


def reopen(log: Log, clock: FakeClock) -> Log:
    log.close(mark_clean=False)  # as if the process died
    return Log(log.dir, log.config, clock=clock)


def _stages(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith((".cleaned-", ".swap-")))


@pytest.mark.parametrize("step", ["staged", "committed", "indexes-moved", "log-moved"])
def test_crash_mid_clean_loses_nothing(
    open_log: Callable[..., Log], clock: FakeClock, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    log = open_log()
    expect = fill(log, clock)
    before = records(log)
    by_offset = {o: (k, v) for o, k, v in before}
    real_commit, real_install = swap.commit, swap.install

    def crash_replace(*a: object, **kw: object) -> bool:
        raise Crash  # the stage is written, the swap never starts

    def crash_commit(staged: Path, base: int, end: int) -> Path:
        real_commit(staged, base, end)
        raise Crash  # committed; originals still in place

    def crash_install(directory: Path, done: Path) -> None:
        names = sorted(os.listdir(done))
        for n in names:
            if n.endswith(".index") or n.endswith(".timeindex") or step == "log-moved":
                os.replace(done / n, directory / n)
        raise Crash  # originals unlinked, some files moved

    if step == "staged":
        monkeypatch.setattr(Log, "replace_segments", crash_replace)
    elif step == "committed":
        monkeypatch.setattr(swap, "commit", crash_commit)
    else:
        monkeypatch.setattr(swap, "install", crash_install)
    with pytest.raises(Crash):
        cleaner.clean_log(log, clock.now)
    assert _stages(log.dir)  # something was left half done
    monkeypatch.setattr(swap, "commit", real_commit)
    monkeypatch.setattr(swap, "install", real_install)
    monkeypatch.undo()
    log2 = reopen(log, clock)
    try:
        assert _stages(log2.dir) == []
        after = records(log2)
        assert {k: v for _, k, v in after} == expect  # every latest value present
        for o, k, v in after:
            assert by_offset[o] == (k, v)  # offsets unchanged
        if step == "staged":
            assert after == before  # rolled back
        else:
            assert len(after) < len(before)  # rolled forward: the first group was swapped
        # and cleaning still works after recovery
        cleaner.clean_log(log2, clock.now)
        assert {k: v for _, k, v in records(log2)} == expect
        assert latest(log2) == latest(log2)
    finally:
        log2.close()


def test_reads_during_cleaning_are_correct(open_log: Callable[..., Log], clock: FakeClock) -> None:
    log = open_log(segment_bytes=8192)
    original: dict[int, tuple[bytes | None, bytes | None]] = {}
    rounds_expect: dict[bytes, bytes] = {}
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        rnd = random.Random(3)
        try:
            while not stop.is_set():
                end = log.log_end_offset
                start = rnd.randrange(0, max(1, end))
                got = records(log, start)
                offs = [o for o, _, _ in got]
                assert offs == sorted(set(offs))
                for o, k, v in got:
                    assert original[o] == (k, v)
                reads[0] += 1
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    for r in range(6):
        rnd = random.Random(r)
        for _ in range(150):
            items = []
            for _ in range(4):
                k = f"k{rnd.randrange(40):02d}".encode()
                v = f"{r}-{rnd.random()}".encode().ljust(50, b"*")
                items.append((k, v))
            info = put(log, items, ts=clock.now)
            for i, (k, v) in enumerate(items):
                original[info.first_offset + i] = (k, v)
                rounds_expect[k] = v
            clock.advance(1)
        log.roll()
        if r == 0:
            t = threading.Thread(target=reader, name="reader")
            t.start()
        assert cleaner.clean_log(log, clock.now) is not None
    stop.set()
    t.join(timeout=60)
    assert not t.is_alive()
    assert not errors, errors[0]
    assert reads[0] > 0
    assert {k: v for _, k, v in records(log)} == rounds_expect


def test_throttler_limits_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    t = cleaner.Throttler(1000.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(10):
        t.acquire(500)
    assert now[0] == pytest.approx(5.0)  # 5000 bytes at 1000 B/s
    unlimited = cleaner.Throttler(None, clock=lambda: 0.0, sleep=sleep)
    unlimited.acquire(10**9)
    assert len(slept) == 10


def test_follower_copies_a_cleaned_log_with_gaps(
    open_log: Callable[..., Log], clock: FakeClock, tmp_path: Path
) -> None:
    leader = open_log()
    expect = fill(leader, clock)
    cleaner.clean_log(leader, clock.now)
    follower = Log(tmp_path / "f-0", TopicConfig(cleanup_policy="compact"), clock=clock)
    try:
        pos = 0
        while pos < leader.log_end_offset:
            s = leader.read(pos, 4096)
            follower.append_as_follower(s.data, list(iter_headers(s.data)))
            pos = s.next_offset
        assert follower.log_end_offset == leader.log_end_offset
        assert records(follower) == records(leader)
        assert {k: v for _, k, v in records(follower)} == expect
    finally:
        follower.close()
