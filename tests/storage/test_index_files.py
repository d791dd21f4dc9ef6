"""Index files opened on demand (issue 17 item 4): the broker's open index files are a bounded
least-recently-used set (fileio.OpenFiles); a closed one reopens on its next write and loses
nothing, and a file being used is never closed under its user."""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_helpers import append, make_batch, read_all

from services.broker.storage import fileio
from services.broker.storage.fileio import LazyFile, OpenFiles

pytestmark = pytest.mark.fast


def test_past_the_bound_the_least_recently_used_idle_files_close_and_reopen_on_use(
    tmp_path: Path,
) -> None:
    files = OpenFiles(1)
    a = LazyFile(tmp_path / "a", files)
    with a.use() as fd:
        os.write(fd, b"a1")
        b = LazyFile(tmp_path / "b", files)  # a is in use: not closed under its user
        assert a.is_open and b.is_open and len(files) == 2
        os.write(fd, b"a2")
    c = LazyFile(tmp_path / "c", files)
    assert (a.is_open, b.is_open, c.is_open) == (False, False, True) and len(files) == 1
    a.fsync()  # a closed file is still synced (through a descriptor of its own)
    with a.use() as fd:  # reopened, appending where it was
        os.write(fd, b"a3")
    assert (tmp_path / "a").read_bytes() == b"a1a2a3"
    assert not c.is_open and len(files) == 1
    for f in (a, b, c):
        f.close()
    assert len(files) == 0
    with pytest.raises(OSError), a.use():
        pass


def test_logs_keep_every_index_entry_when_their_index_files_are_closed_between_writes(
    open_log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fileio.INDEX_FILES, "bound", 4)
    logs = [open_log(tmp_path / f"t-{i}", index_interval_bytes=1) for i in range(5)]
    batches = [make_batch(tag=r) for r in range(3)]
    for batch in batches:
        for log in logs:
            append(log, batch)
    # 5 active segments' 10 index files written in turn, at most 4 open
    assert len(fileio.INDEX_FILES) <= 4
    for i, log in enumerate(logs):
        log.flush()
        seg = log._segments[-1]
        assert len(seg.offset_index) == 2  # every batch after the first is indexed
        assert seg.offset_index.path.stat().st_size == 2 * 8, i
        assert len(read_all(log)) == sum(map(len, batches))
        assert len(read_all(log, 6)) == len(batches[2])  # found through the index
        log.close()
    # reopened: both indexes load as written (no rebuild needed), every record is there
    for i in range(5):
        log = open_log(tmp_path / f"t-{i}", index_interval_bytes=1)
        seg = log._segments[-1]
        assert seg.indexes_existed and len(seg.offset_index) == 2
        assert log.log_end_offset == 9
        log.close()


def test_a_use_racing_a_release_stays_counted_in_the_bound(tmp_path: Path) -> None:
    """release() forgets the file under its lock: a use() that reopens it at that moment
    registers after the forget, so no open descriptor is left outside the bound."""
    import threading

    raced: list[threading.Thread] = []

    def use_once(f: LazyFile) -> None:
        with f.use():
            pass

    class Racing(OpenFiles):
        def _forget(self, f: LazyFile) -> None:
            if not raced:  # a use() on another thread, exactly between close and forget
                t = threading.Thread(target=use_once, args=(f,))
                raced.append(t)
                t.start()
                t.join(timeout=0.5)  # finishes now only if release() dropped f's lock
            super()._forget(f)

    files = Racing(4)
    f = LazyFile(tmp_path / "f", files)
    f.release()
    raced[0].join(timeout=10)
    assert not raced[0].is_alive()
    assert f.is_open and len(files) == 1  # the reopened descriptor is counted
    f.close()
    assert len(files) == 0


def test_an_open_past_the_bound_visits_only_the_files_it_closes(tmp_path: Path) -> None:
    """Eviction walks from the least recently used end and stops: not a copy of the set."""
    visited = [0]

    class Counting(collections.OrderedDict[LazyFile, None]):
        def __iter__(self) -> Iterator[LazyFile]:
            for k in super().__iter__():
                visited[0] += 1
                yield k

    files = OpenFiles(200)
    files._lru = Counting()
    opened = [LazyFile(tmp_path / f"{i}.index", files) for i in range(200)]
    visited[0] = 0
    extra = LazyFile(tmp_path / "extra.index", files)
    assert visited[0] == 1
    assert not opened[0].is_open and opened[1].is_open and extra.is_open and len(files) == 200
    for f in [*opened, extra]:
        f.close()


def _open_files_under(directory: Path) -> collections.Counter[str]:
    """This process's open descriptors on files under ``directory``, by file suffix."""
    out: collections.Counter[str] = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # closed since listed (the listing's own descriptor)
        if target.is_relative_to(directory):
            out[target.suffix] += 1
    return out


def test_a_partition_holds_one_descriptor_per_segment_and_index_files_share_the_bound(
    open_log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What docs/storage.md (Threads: Descriptors) states: every segment keeps its ``.log``
    open, sealed segments' index files are closed, and the active segments' index files of
    all partitions share the bounded set (``--index-files-open-max``) instead of costing each
    partition two more descriptors."""
    monkeypatch.setattr(fileio.INDEX_FILES, "bound", 2)
    logs = [
        open_log(tmp_path / f"t-{i}", segment_bytes=200, index_interval_bytes=1) for i in range(3)
    ]
    for r in range(4):
        for log in logs:
            append(log, make_batch(tag=r, value_size=60))
    segments = [len(log._segments) for log in logs]
    assert all(n >= 3 for n in segments), segments
    open_now = _open_files_under(tmp_path)
    assert open_now[".log"] == sum(segments)  # one per segment, sealed ones included
    # the last partition written keeps its active pair open; the others' were closed
    assert open_now[".index"] + open_now[".timeindex"] == 2
    assert len(fileio.INDEX_FILES) == 2
    assert sum(open_now.values()) == sum(segments) + 2, open_now  # nothing else is held
    for log in logs:
        log.close()
    assert _open_files_under(tmp_path) == collections.Counter()
