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
from storage_helpers import append, make_batch

from headwater.errors import KafkaStorageError

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
    real_open = os.open

    def emfile(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith((".index", ".timeindex")) and flags & os.O_RDWR:
            raise OSError(errno.EMFILE, "Too many open files", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", emfile)
    with pytest.raises(KafkaStorageError):
        append(log, make_batch(tag=2, ts=3_000))
    monkeypatch.undo()
    assert observed() == before
    # and the log goes on where it was once descriptors are available again
    append(log, make_batch(tag=3, ts=4_000))
    assert log.log_end_offset == before[0] + 3
