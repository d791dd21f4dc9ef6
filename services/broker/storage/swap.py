"""Crash-safe replacement of sealed segments by their cleaned copy (log compaction).

The cleaner writes the cleaned copy of the segments covering offsets ``[base, end)`` as an
ordinary segment (``<base>.log`` / ``.index`` / ``.timeindex``, plus ``<base>.txnindex``
holding the aborted-transaction entries of every replaced segment when there are any)
inside a staging directory of the partition directory, then swaps it in. The states, and
what ``recover`` (called by ``Log`` before it loads) does with each after a crash:

1. ``.cleaned-<base>-<end>/``: being written, not yet committed. Recovery deletes it: the
   original segments are untouched (roll back).
2. ``.swap-<base>-<end>/`` holding ``<base>.log``: committed (one directory rename, done by
   ``Log.replace_segments`` under the log's lock after checking the log did not change).
   Recovery deletes every original segment whose base offset lies in ``[base, end)`` and
   moves the files in (roll forward).
3. ``.swap-<base>-<end>/`` without ``<base>.log``: the originals are gone and the log file
   was moved in (it is moved last, after the indexes). Recovery removes the directory.

``<base>`` and ``<end>`` are 20-digit offsets: ``end`` is the base of the first segment after
the replaced run, so the range names exactly the originals. Renames within one directory
tree are atomic; each step fsyncs the directory it changed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from services.broker.storage import txn_index
from services.broker.storage.segment import file_names

CLEANED_PREFIX = ".cleaned-"
SWAP_PREFIX = ".swap-"
_NAME = re.compile(r"^\.(cleaned|swap)-(\d{20})-(\d{20})$")


def staging_dir(directory: Path, base: int, end: int) -> Path:
    """Where the cleaner writes the cleaned copy of ``[base, end)`` (state 1)."""
    return directory / f"{CLEANED_PREFIX}{base:020d}-{end:020d}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def discard(staged: Path) -> None:
    """Remove a stage that will not be installed."""
    shutil.rmtree(staged, ignore_errors=True)


def commit(staged: Path, base: int, end: int) -> Path:
    """State 1 -> 2: fsync the staged files, rename the stage to its swap name."""
    for f in staged.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    _fsync_dir(staged)
    done = staged.parent / f"{SWAP_PREFIX}{base:020d}-{end:020d}"
    os.rename(staged, done)
    _fsync_dir(staged.parent)
    return done


def install(directory: Path, done: Path) -> None:
    """State 2 -> 3 -> gone, once the originals are unlinked: indexes first, log last."""
    m = _NAME.match(done.name)
    assert m is not None, done
    log_name, index_name, time_name = file_names(int(m.group(2)))
    txn_name = txn_index.path_for(directory, int(m.group(2))).name
    for name in (index_name, time_name, txn_name, log_name):
        src = done / name
        if src.exists():
            os.replace(src, directory / name)
    _fsync_dir(directory)
    shutil.rmtree(done, ignore_errors=True)


def recover(directory: Path) -> list[str]:
    """Finish or roll back every interrupted swap in ``directory``; what it did, for logs."""
    actions: list[str] = []
    for stage in sorted(directory.glob(".*-*-*")):
        m = _NAME.match(stage.name)
        if m is None or not stage.is_dir():
            continue
        kind, base, end = m.group(1), int(m.group(2)), int(m.group(3))
        if kind == "cleaned":
            discard(stage)
            actions.append(f"rolled back {stage.name}")
            continue
        log_name = file_names(base)[0]
        if (stage / log_name).exists():
            for old in directory.glob("*.log"):
                if old.stem.isdigit() and len(old.stem) == 20 and base <= int(old.stem) < end:
                    txn_name = txn_index.path_for(directory, int(old.stem)).name
                    for name in (*file_names(int(old.stem)), txn_name):
                        with contextlib.suppress(FileNotFoundError):
                            (directory / name).unlink()
            install(directory, stage)
            actions.append(f"completed {stage.name}")
        else:
            discard(stage)
            actions.append(f"cleaned up {stage.name}")
    return actions
