"""Small per-partition state files next to the segments.

``partition.checkpoint`` (JSON, replaced atomically: write ``.tmp``, fsync, rename)::

    {"version": 1, "log_start_offset": <int>, "recovery_point": <int>}

``log_start_offset`` survives restarts (retention may have advanced it past a segment
boundary's worth of history, and deleted segments cannot tell). ``recovery_point`` is the
offset below which every byte was fsynced; on an unclean start only segments that reach past
it (and always the active one) are scanned by CRC.

``.clean_shutdown`` (empty) is written by ``Log.close`` after everything is fsynced and
removed when the log is opened: its absence at open means the last run did not close the
log and the tail must be validated.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from services.broker.storage.fileio import replace_atomically

CHECKPOINT_FILE = "partition.checkpoint"
CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
VERSION = 1


@dataclass(frozen=True, slots=True)
class Checkpoint:
    log_start_offset: int
    recovery_point: int


def read_checkpoint(directory: Path) -> Checkpoint | None:
    """The stored checkpoint, or None when missing or unreadable (treated as absent)."""
    try:
        doc = json.loads((directory / CHECKPOINT_FILE).read_text())
        cp = Checkpoint(int(doc["log_start_offset"]), int(doc["recovery_point"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if doc.get("version") != VERSION or cp.log_start_offset < 0 or cp.recovery_point < 0:
        return None
    return cp


def write_checkpoint(directory: Path, cp: Checkpoint, *, sync: bool = True) -> None:
    """Atomically replace the checkpoint (tmp file, fsync, rename; ``sync=False``: without
    the fsyncs, see ``fileio.replace_atomically``)."""
    doc = {
        "version": VERSION,
        "log_start_offset": cp.log_start_offset,
        "recovery_point": cp.recovery_point,
    }
    replace_atomically(directory / CHECKPOINT_FILE, json.dumps(doc).encode(), sync=sync)


def mark_clean_shutdown(directory: Path) -> None:
    fd = os.open(directory / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def take_clean_shutdown(directory: Path) -> bool:
    """Whether the marker was there; removes it (the log is now open and may be torn)."""
    path = directory / CLEAN_SHUTDOWN_FILE
    if path.exists():
        path.unlink()
        return True
    return False
