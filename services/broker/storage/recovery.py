"""Opening a partition's segments at start-up, and rebuilding its leader-epoch cache.

Called by ``Log`` while it loads (single-threaded, before the log is shared).

Segment recovery: after an unclean shutdown every segment reaching past the recovery point
(and always the active one) is scanned by CRC; a segment whose indexes do not check out is
rebuilt the same way. Damage in a sealed segment cuts the log there: nothing after it can be
trusted or served, so later segments are deleted.

Epoch cache: read from ``leader-epoch-checkpoint``; when it is missing or damaged it is
rebuilt from the batch headers (each batch records the leader epoch it was written in), then
cut to the recovered log (entries at or past the log end, or wholly below the log start).
After an unclean shutdown the epochs of the batches in the segments reaching past the
recovery point are added from their headers too: new entries are kept in memory and the
file is written behind and fsynced only before the recovery point moves past them
(``leader_epoch`` module doc), so the file may lack the newest ones.
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
    clean: bool = True,
    recovery_point: int = 0,
    on_rebuild: Callable[[], None] | None = None,
    sync: bool = True,
) -> LeaderEpochCache:
    """The partition's epoch cache, rebuilt from batch headers when the file is unusable
    (the rebuilt file fsynced unless ``sync`` is False); after an unclean shutdown
    (``clean`` False) completed from the headers of the segments reaching past
    ``recovery_point``."""
    entries = read_entries(directory)
    if entries is None:
        found: list[EpochEntry] = []
        for seg in segments:
            for h in seg.headers(seg.size):
                if h.partition_leader_epoch > (found[-1].epoch if found else -1):
                    found.append(EpochEntry(h.partition_leader_epoch, h.base_offset))
        cache = LeaderEpochCache(directory, found)
        cache.flush(sync=sync)
        if on_rebuild is not None:
            on_rebuild()
    else:
        cache = LeaderEpochCache(directory, entries)
        if not clean:
            _add_epochs_past(cache, segments, recovery_point)
    cache.truncate_from_end(log_end)
    cache.truncate_from_start(log_start)
    return cache


def _add_epochs_past(
    cache: LeaderEpochCache, segments: Sequence[LogSegment], recovery_point: int
) -> None:
    """Assign the epochs the batch headers of the segments reaching past ``recovery_point``
    start that are newer than the cache's latest (entries the file may not have reached the
    disk with), then fsync the file if that added any."""
    for i, seg in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if next_base is not None and next_base <= recovery_point:
            continue
        for h in seg.headers(seg.size):
            if h.partition_leader_epoch > cache.latest_epoch:
                cache.assign(h.partition_leader_epoch, h.base_offset)
    cache.sync()
