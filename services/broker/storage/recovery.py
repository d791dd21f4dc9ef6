"""Opening a partition's segments at start-up, and rebuilding its leader-epoch cache.

Called by ``Log`` while it loads (single-threaded, before the log is shared).

Segment recovery: after an unclean shutdown every segment reaching past the recovery point
(and always the active one) is scanned by CRC; a segment whose indexes do not check out is
rebuilt the same way. Damage in a sealed segment cuts the log there: nothing after it can be
trusted or served, so later segments are deleted.

Epoch cache: read from ``leader-epoch-checkpoint``; when it is missing or damaged it is
rebuilt from the batch headers (each batch records the leader epoch it was written in), then
cut to the recovered log (entries at or past the log end, or wholly below the log start).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from services.broker.storage.leader_epoch import EpochEntry, LeaderEpochCache, read_entries
from services.broker.storage.segment import LogSegment


def recover_segments(
    segs: list[LogSegment], *, clean: bool, recovery_point: int, now: int
) -> tuple[list[LogSegment], int]:
    """Load or recover ``segs`` (ascending base offsets); returns the kept segments and the
    number of bytes cut off."""
    cut_total = 0
    i = 0
    while i < len(segs):
        seg = segs[i]
        next_base = segs[i + 1].base_offset if i + 1 < len(segs) else None
        must_scan = not clean and (next_base is None or next_base > recovery_point)
        if must_scan or not seg.load(next_base, now):
            cut = seg.recover()
            cut_total += cut
            if seg.rolling_base_ms is not None:
                seg.rolling_base_ms = min(seg.rolling_base_ms, now)
            if next_base is not None:
                seg.seal()  # the rebuilt time index ends with the segment's largest ts
            if next_base is not None and (cut > 0 or seg.next_offset > next_base):
                for later in segs[i + 1 :]:
                    cut_total += later.size
                    later.delete()
                    later.close()
                del segs[i + 1 :]
        i += 1
    return segs, cut_total


def load_epoch_cache(
    directory: Path,
    segments: Sequence[LogSegment],
    *,
    log_start: int,
    log_end: int,
    on_rebuild: Callable[[], None] | None = None,
) -> LeaderEpochCache:
    """The partition's epoch cache, rebuilt from batch headers when the file is unusable."""
    entries = read_entries(directory)
    if entries is None:
        found: list[EpochEntry] = []
        for seg in segments:
            for h in seg.headers(seg.size):
                if h.partition_leader_epoch > (found[-1].epoch if found else -1):
                    found.append(EpochEntry(h.partition_leader_epoch, h.base_offset))
        cache = LeaderEpochCache(directory, found)
        cache.flush()
        if on_rebuild is not None:
            on_rebuild()
    else:
        cache = LeaderEpochCache(directory, entries)
    cache.truncate_from_end(log_end)
    cache.truncate_from_start(log_start)
    return cache
