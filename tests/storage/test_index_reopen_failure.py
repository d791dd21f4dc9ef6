"""An index file closed by the bounded set of open index files (fileio.OpenFiles) must be
reopened for its next write; when that reopen fails (EMFILE: the very descriptor shortage the
bound is for), the append fails with KAFKA_STORAGE_ERROR and leaves nothing behind, as
Segment.append promises (review of issue 17 item 4)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import append, make_batch, read_all

from headwater.errors import KafkaStorageError
from services.broker.storage import fileio
from services.broker.storage.offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE
from services.broker.storage.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE

pytestmark = pytest.mark.fast


def test_an_index_that_cannot_be_reopened_fails_the_append_and_leaves_the_segment_as_it_was(
    open_log: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(index_interval_bytes=1)
    append(log, make_batch(tag=0, ts=1_000))
    append(log, make_batch(tag=1, ts=2_000))
    seg = log._segments[-1]

    def observed() -> tuple[int, ...]:
        return (
            log.log_end_offset,
            seg.size,
            len(seg.offset_index),
            len(seg.time_index),
            seg.max_timestamp,
            seg.offset_of_max_timestamp,
        )

    before = observed()
    # both index files closed by the LRU since their last write (other partitions' were used)
    seg.offset_index._file.release()
    seg.time_index._file.release()
    _no_index_reopen(monkeypatch)
    with pytest.raises(KafkaStorageError):
        append(log, make_batch(tag=2, ts=3_000))
    monkeypatch.undo()
    assert observed() == before
    # and the log goes on where it was once descriptors are available again
    append(log, make_batch(tag=3, ts=4_000))
    assert log.log_end_offset == before[0] + 3


def _no_index_reopen(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def emfile(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith((".index", ".timeindex")) and flags & os.O_RDWR:
            raise OSError(errno.EMFILE, "Too many open files", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", emfile)


def test_a_cut_that_cannot_be_made_is_made_before_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.index"
    f = fileio.LazyFile(path, fileio.OpenFiles(4))
    f.append(b"a" * 16, 0)
    f.release()
    _no_index_reopen(monkeypatch)
    with pytest.raises(OSError):
        f.truncate(8)
    with pytest.raises(OSError):
        f.append(b"c" * 8, 8)
    monkeypatch.undo()
    assert path.read_bytes() == b"a" * 16  # nothing could be done yet
    f.append(b"b" * 8, 8)
    assert path.read_bytes() == b"a" * 8 + b"b" * 8
    f.close()


def test_sealing_with_an_index_that_cannot_be_reopened_fails_typed_and_changes_nothing(
    open_log: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log()  # default interval: the one batch (at position 0) has no index entry
    append(log, make_batch(tag=0, ts=1_000))
    seg = log._segments[-1]
    seg.offset_index._file.release()
    seg.time_index._file.release()
    _no_index_reopen(monkeypatch)
    with pytest.raises(KafkaStorageError):
        log.roll()  # the seal writes the largest timestamp to the time index
    monkeypatch.undo()
    assert log._segments == [seg] and len(seg.time_index) == 0
    log.roll()
    assert len(log._segments) == 2 and len(seg.time_index) == 1
    assert seg.time_index.path.stat().st_size == TIME_ENTRY_SIZE


def test_truncating_with_indexes_that_cannot_be_reopened_keeps_the_log_consistent(
    open_log: Any, clock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(index_interval_bytes=1)
    # timestamps of now: the segment does not roll (segment.ms) at the append below
    batches = [make_batch(tag=i, ts=clock.now + i) for i in range(3)]
    for b in batches:
        append(log, b)
    seg = log._segments[-1]
    seg.offset_index._file.release()
    seg.time_index._file.release()
    _no_index_reopen(monkeypatch)
    # the log is cut; the indexes, whose files cannot be rewritten, are left empty (a
    # lookup then scans the segment from its start) with their files' cut pending
    log.truncate_to(3)
    monkeypatch.undo()
    assert log.log_end_offset == 3
    assert (len(seg.offset_index), len(seg.time_index)) == (0, 0)
    last = make_batch(tag=9, ts=clock.now + 9)
    append(log, last)
    assert log.log_end_offset == 6
    # the next write made the pending cut first: each file holds exactly its entries
    assert seg.offset_index.path.stat().st_size == len(seg.offset_index) * OFFSET_ENTRY_SIZE
    assert seg.time_index.path.stat().st_size == len(seg.time_index) * TIME_ENTRY_SIZE
    kept = read_all(log)
    assert len(kept) == len(batches[0]) + len(last)
    log.close()
    again = open_log(tmp_path / "t-0")
    assert (again.log_end_offset, read_all(again)) == (6, kept)
