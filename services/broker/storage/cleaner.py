"""Log compaction (Kafka design 4.8): keep at least the latest record of every key.

One pass over one log (:func:`clean_log`), run by the broker's cleaner task in a worker
thread, one log at a time:

1. **Plan.** The *dirty* section runs from the cleaner checkpoint (``offset_map.py``; the
   first offset no pass has cleaned) to the *cleanable end*: the base of the active segment,
   or earlier, the base of the first sealed segment holding a record younger than
   ``min.compaction.lag.ms``. The active segment is never read or touched. The log is
   cleaned when dirty bytes / (clean + dirty bytes) >= ``min.cleanable.dirty.ratio``, or
   when the oldest dirty record is older than ``max.compaction.lag.ms``.
2. **Map.** Key -> latest offset over the dirty section (whole-batch column decoding). At
   most ``max_map_keys`` distinct keys per pass: the dirty section is cut at a segment
   boundary when the map is full (the rest is cleaned by the next pass).
3. **Rewrite.** Every sealed segment below the cleanable end is copied, in groups of
   consecutive segments whose total size fits ``segment.bytes``, into one staged segment
   keeping a record iff its key's latest offset (from the map) is not after it, or its key is
   not in the map. Records without a key are dropped (a compacted topic cannot address them).
   Tombstones (keyed records with a null value) are kept, except in segments an earlier pass
   already cleaned whose newest timestamp is older than ``delete.retention.ms`` (so a
   consumer that reaches the head within delete.retention.ms of the delete sees it). A batch
   whose records all survive is copied byte for byte; a partly kept batch is re-encoded with
   the same base offset, offsets (offset deltas), timestamps, headers, producer fields,
   leader epoch and codec; an emptied batch is dropped. Offsets never change: a cleaned log
   has gaps, which readers skip (``Log.read`` returns the next batch; consumers move their
   position to the end of the batch they got).
   Transactions (docs/transactions.md): the cleanable end never passes the log's first
   unstable offset, so no batch of an open transaction is read or rewritten. Control
   batches (markers) are copied as they are and never enter the map. Records of aborted
   transactions (a transactional batch of a pid inside an aborted range of the txnindex)
   are dropped and never enter the map, so they cannot shadow a committed value. The
   txnindex entries of the replaced segments move to the cleaned one (``Log.replace_segments``).
4. **Swap.** Each staged group replaces its originals with ``Log.replace_segments`` (crash
   protocol in ``swap.py``); then the checkpoint moves to the cleanable end.

Reads are never blocked: the pass reads sealed segments through a snapshot without the log's
lock and takes the lock only for the swap. I/O is throttled by a :class:`Throttler`
(bytes read plus bytes written per second).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from headwater.batch.codec import RecordBatch, encode_batch, set_log_append_time
from headwater.batch.layout import ATTR_LOG_APPEND_TIME, HEADER_SIZE, BatchHeader, parse_header
from services.broker.storage import offset_map, swap
from services.broker.storage.log import Log
from services.broker.storage.offset_index import MAX_U32
from services.broker.storage.segment import BatchMeta, LogSegment

#: Bytes read from a segment at once.
READ_CHUNK = 1024 * 1024
#: Default bound on distinct keys in one pass's map.
DEFAULT_MAX_MAP_KEYS = 1_000_000


class Throttler:
    """At most ``bytes_per_s`` on average (None: unlimited); ``acquire`` sleeps the caller."""

    def __init__(
        self,
        bytes_per_s: float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bytes_per_s = bytes_per_s
        self._clock, self._sleep = clock, sleep
        self._start = clock()
        self._done = 0.0

    def acquire(self, nbytes: int) -> None:
        if not self.bytes_per_s:
            return
        self._done += nbytes
        ahead = self._done / self.bytes_per_s - (self._clock() - self._start)
        if ahead > 0:
            self._sleep(ahead)


@dataclass(frozen=True, slots=True)
class Plan:
    """What one pass would clean: offsets ``[first_dirty, end)`` are dirty."""

    first_dirty: int
    end: int
    clean_bytes: int
    dirty_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(frozen=True, slots=True)
class CleanResult:
    """One pass: segments before/after, bytes read/written, records removed."""

    plan: Plan
    segments_before: int
    segments_after: int
    bytes_read: int
    bytes_written: int
    records_removed: int
    #: Groups whose swap was refused because the log changed under the pass.
    groups_abandoned: int


def plan(log: Log, now_ms: int, max_offset: int | None = None) -> Plan | None:
    """The dirty section of ``log`` if it should be cleaned now, else None (module doc, 1).

    ``max_offset`` (the high watermark) bounds the cleanable end: records a follower may
    still truncate must not decide what is removed."""
    cfg = log.config
    if not cfg.compact_enabled:
        return None
    unstable = log.first_unstable_offset
    if unstable is not None:
        max_offset = unstable if max_offset is None else min(max_offset, unstable)
    snap = log.snapshot()
    sealed = snap.segments[:-1]
    if not sealed:
        return None
    first_dirty = max(offset_map.read_first_dirty(log.dir), snap.log_start_offset)
    clean_bytes = dirty_bytes = 0
    end = snap.segments[-1].base_offset
    oldest_dirty: int | None = None
    horizon = now_ms - cfg.min_compaction_lag_ms
    for i, seg in enumerate(sealed):
        nxt = snap.bases[i + 1]
        if max_offset is not None and nxt > max_offset:
            end = seg.base_offset
            break
        if nxt <= first_dirty:
            clean_bytes += snap.sealed_ends[i]
            continue
        if cfg.min_compaction_lag_ms > 0 and seg.largest_timestamp() > horizon:
            end = seg.base_offset
            break
        dirty_bytes += snap.sealed_ends[i]
        if oldest_dirty is None:
            first = next(seg.headers(snap.sealed_ends[i]), None)
            oldest_dirty = first.first_timestamp if first is not None else None
    first_dirty = min(first_dirty, end)
    if dirty_bytes == 0 or first_dirty >= end:
        return None
    p = Plan(first_dirty, end, clean_bytes, dirty_bytes)
    overdue = oldest_dirty is not None and now_ms - oldest_dirty > cfg.max_compaction_lag_ms
    if p.dirty_ratio >= cfg.min_cleanable_dirty_ratio or overdue:
        return p
    return None


def _batches(
    seg: LogSegment, end: int, throttler: Throttler
) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every whole batch below position ``end`` of a sealed segment: (header, bytes)."""
    pos = 0
    while pos + HEADER_SIZE <= end:
        chunk = seg.read(pos, min(READ_CHUNK, end - pos))
        throttler.acquire(len(chunk))
        p = 0
        while p + HEADER_SIZE <= len(chunk):
            h = parse_header(chunk, p)
            if p + h.total_size > len(chunk):
                break
            yield h, chunk[p : p + h.total_size]
            p += h.total_size
        if p == 0:  # one batch larger than the chunk
            h = parse_header(chunk, 0)
            raw = seg.read(pos, h.total_size)
            throttler.acquire(len(raw))
            yield h, raw
            p = h.total_size
        pos += p


def _filter_batch(
    h: BatchHeader, raw: bytes, latest: offset_map.OffsetMap, drop_tombstones: bool
) -> tuple[bytes | None, int]:
    """The batch to keep (``raw`` itself, a re-encoded one, or None) and records removed."""
    batch = RecordBatch(raw, h, check_crc=False)
    keys = batch.keys()
    offsets = batch.offsets().tolist()
    values = batch.values()
    keep = [
        i
        for i, (k, off) in enumerate(zip(keys, offsets, strict=True))
        if k is not None and latest.get(k) <= off and not (drop_tombstones and values[i] is None)
    ]
    removed = len(keys) - len(keep)
    if not removed:
        return raw, 0
    if not keep:
        return None, removed
    headers = batch.headers()
    timestamps = batch.timestamps()
    out = encode_batch(
        [values[i] for i in keep],
        [keys[i] for i in keep],
        headers=[headers[i] for i in keep],
        timestamps=[int(timestamps[i]) for i in keep],
        offset_deltas=[offsets[i] - h.base_offset for i in keep],
        base_offset=h.base_offset,
        partition_leader_epoch=h.partition_leader_epoch,
        compression_type=h.compression,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        transactional=h.is_transactional,
        control=h.is_control,
    )
    if h.attributes & ATTR_LOG_APPEND_TIME:
        stamped = bytearray(out)
        set_log_append_time(stamped, h.max_timestamp)
        out = bytes(stamped)
    return out, removed


def _aborted_ranges(segments: Sequence[LogSegment]) -> dict[int, list[tuple[int, int]]]:
    """pid -> [(first offset, ABORT marker offset)] of every aborted transaction."""
    out: dict[int, list[tuple[int, int]]] = {}
    for seg in segments:
        for e in seg.txn_index.entries():
            out.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
    return out


def _aborted(h: BatchHeader, ranges: dict[int, list[tuple[int, int]]]) -> bool:
    """Whether ``h`` is a data batch of an aborted transaction."""
    if not h.is_transactional or h.producer_id not in ranges:
        return False
    return any(first <= h.base_offset <= last for first, last in ranges[h.producer_id])


def _groups(log: Log, end: int) -> list[tuple[list[LogSegment], list[int], int]]:
    """Runs of consecutive sealed segments below ``end`` fitting segment.bytes (and the u32
    index fields): (segments, their sizes, base of the segment after the run)."""
    snap = log.snapshot()
    limit = log.config.segment_bytes
    out: list[tuple[list[LogSegment], list[int], int]] = []
    segs: list[LogSegment] = []
    sizes: list[int] = []
    for i, seg in enumerate(snap.segments[:-1]):
        if seg.base_offset >= end:
            break
        size, nxt = snap.sealed_ends[i], snap.bases[i + 1]
        if segs and (sum(sizes) + size > limit or nxt - segs[0].base_offset > MAX_U32):
            out.append((segs, sizes, seg.base_offset))
            segs, sizes = [], []
        segs.append(seg)
        sizes.append(size)
        last_end = nxt
    if segs:
        out.append((segs, sizes, last_end))
    return out


def clean_log(
    log: Log,
    now_ms: int,
    *,
    throttler: Throttler | None = None,
    max_map_keys: int = DEFAULT_MAX_MAP_KEYS,
    max_offset: int | None = None,
) -> CleanResult | None:
    """One cleaning pass over ``log`` if it is due (module doc); None when it is not.

    ``max_offset``: the high watermark (see :func:`plan`). Runs in the caller's thread and
    blocks on disk I/O and the throttle: call it off the event loop.
    """
    p = plan(log, now_ms, max_offset)
    if p is None:
        return None
    thr = throttler or Throttler(None)
    version = log.structure_version
    snap = log.snapshot()
    before = len(snap.segments)
    cfg = log.config
    latest = offset_map.OffsetMap()
    aborted = _aborted_ranges(snap.segments)
    end = p.end
    read = 0
    for i, seg in enumerate(snap.segments[:-1]):
        nxt = snap.bases[i + 1]
        if nxt <= p.first_dirty:
            continue
        if seg.base_offset >= end:
            break
        if len(latest) >= max_map_keys and seg.base_offset > p.first_dirty:
            end = seg.base_offset  # map full: the rest waits for the next pass
            break
        for h, raw in _batches(seg, snap.sealed_ends[i], thr):
            read += len(raw)
            if not h.is_control and not _aborted(h, aborted):
                latest.add_batch(RecordBatch(raw, h, check_crc=False), p.first_dirty)
    written = removed = abandoned = 0
    for group, sizes, group_end in _groups(log, end):
        base = group[0].base_offset
        stage = swap.staging_dir(log.dir, base, group_end)
        swap.discard(stage)
        stage.mkdir()
        out = LogSegment(
            stage,
            base,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_bytes=cfg.segment_index_bytes,
        )
        group_removed = 0
        try:
            for seg, size in zip(group, sizes, strict=True):
                already_clean = seg.base_offset < p.first_dirty
                drop = already_clean and now_ms - seg.largest_timestamp() > cfg.delete_retention_ms
                for h, raw in _batches(seg, size, thr):
                    read += len(raw)
                    if h.is_control:
                        kept, n = raw, 0
                    elif _aborted(h, aborted):
                        kept, n = None, h.record_count
                    else:
                        kept, n = _filter_batch(h, raw, latest, drop)
                    group_removed += n
                    if kept is None:
                        continue
                    kh = parse_header(kept, 0)
                    meta = BatchMeta(kh.base_offset, kh.last_offset, kh.max_timestamp, len(kept))
                    out.append([kept], [meta], now_ms)
                    thr.acquire(len(kept))
            out.seal()
        finally:
            out.close()
        if group_removed == 0 and len(group) == 1:
            swap.discard(stage)  # nothing to gain from rewriting it
            continue
        if log.replace_segments(group, stage, end=group_end, version=version):
            version += 1  # our swap; any other change since makes the next swap refuse
            written += out.size
            removed += group_removed
        else:
            abandoned += 1
    if not abandoned:
        offset_map.write_first_dirty(log.dir, end)
    return CleanResult(
        Plan(p.first_dirty, end, p.clean_bytes, p.dirty_bytes),
        before,
        log.num_segments,
        read,
        written,
        removed,
        abandoned,
    )
