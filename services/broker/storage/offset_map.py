"""The cleaner's per-partition state: the key -> latest offset map and the clean checkpoint.

``cleaner.checkpoint`` (JSON, replaced atomically: write ``.tmp``, fsync, rename)::

    {"version": 1, "first_dirty_offset": <int>}

Everything below ``first_dirty_offset`` has been cleaned at least once (it is always a
segment base offset, the end of the last cleaned range). Missing or unreadable: 0 (the
whole log is dirty, which is safe: cleaning is idempotent).
"""

from __future__ import annotations

import json
from pathlib import Path

from headwater.batch.codec import RecordBatch
from services.broker.storage.fileio import replace_atomically

CHECKPOINT_FILE = "cleaner.checkpoint"
VERSION = 1


def read_first_dirty(directory: Path) -> int:
    try:
        doc = json.loads((directory / CHECKPOINT_FILE).read_text())
        value = int(doc["first_dirty_offset"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    return value if doc.get("version") == VERSION and value >= 0 else 0


def write_first_dirty(directory: Path, offset: int) -> None:
    doc = {"version": VERSION, "first_dirty_offset": offset}
    replace_atomically(directory / CHECKPOINT_FILE, json.dumps(doc).encode())


class OffsetMap:
    """Latest offset of every key seen in the dirty section (a plain dict: one Python entry
    per distinct key, so the cleaner bounds a pass by ``max_entries`` distinct keys)."""

    __slots__ = ("latest",)

    def __init__(self) -> None:
        self.latest: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self.latest)

    def add_batch(self, batch: RecordBatch, min_offset: int) -> None:
        """Record every keyed record of ``batch`` at or after ``min_offset`` (later wins)."""
        keys = batch.keys()
        offsets = batch.offsets().tolist()
        latest = self.latest
        for key, off in zip(keys, offsets, strict=True):
            if key is not None and off >= min_offset:
                latest[key] = off

    def get(self, key: bytes) -> int:
        return self.latest.get(key, -1)
