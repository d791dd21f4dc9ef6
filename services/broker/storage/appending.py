"""What one append writes: the byte pieces and per-batch metadata, leader or follower mode.

Pure (no I/O, no lock): ``Log`` calls :func:`prepare` under its lock and then writes the
pieces to the active segment.

* Leader mode (``leader_epoch`` set): each batch's 64-byte header is copied and patched with
  its base offset (dense, from ``start``) and the leader epoch; the rest of the batch is a
  view of the caller's buffer (records are never copied). With ``append_time`` set
  (LogAppendTime topics) the whole batch is copied once and stamped.
* Follower mode (``leader_epoch`` None): the leader's batches are written as they are; each
  must start at or after the offset where the previous one ended, the first at or after
  ``start`` (InvalidRequestError otherwise). A batch may start *after* it: log compaction
  leaves gaps in the offsets of a cleaned leader log (offsets never change, records go).

``new_epochs`` lists ``(epoch, start offset)`` for each batch whose leader epoch is newer than
``latest_epoch`` and the batches before it: the epoch-cache entries the append adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from headwater.batch.codec import patch_header, set_log_append_time
from headwater.batch.layout import HEADER_SIZE, BatchHeader
from headwater.errors import InvalidRequestError
from services.broker.storage.segment import BatchMeta

Buffer = bytes | bytearray | memoryview


@dataclass(slots=True)
class Prepared:
    pieces: list[Buffer] = field(default_factory=list)
    metas: list[BatchMeta] = field(default_factory=list)
    new_epochs: list[tuple[int, int]] = field(default_factory=list)
    next_offset: int = 0
    max_timestamp: int = -1
    offset_of_max_timestamp: int = 0
    records: int = 0


def measure(view: memoryview, batches: Sequence[tuple[int, BatchHeader]]) -> tuple[int, int]:
    """(bytes, offsets) the batches occupy; InvalidRequestError when there are none or one
    does not lie inside ``view``."""
    if not batches:
        raise InvalidRequestError("append of zero batches")
    total = offsets = 0
    for pos, h in batches:
        if pos < 0 or pos + h.total_size > view.nbytes or h.total_size < HEADER_SIZE:
            raise InvalidRequestError(f"batch at {pos} ({h.total_size} B) is outside the buffer")
        total += h.total_size
        offsets += h.last_offset_delta + 1
    return total, offsets


def prepare(
    view: memoryview,
    batches: Sequence[tuple[int, BatchHeader]],
    *,
    start: int,
    leader_epoch: int | None,
    append_time: int | None,
    latest_epoch: int,
) -> Prepared:
    """Pieces and metadata for ``batches`` appended at offset ``start`` (see module doc)."""
    w = Prepared(next_offset=start, offset_of_max_timestamp=start)
    nxt = start
    for pos, h in batches:
        size = h.total_size
        if leader_epoch is None:
            if h.base_offset < nxt:
                raise InvalidRequestError(
                    f"replicated batch at {h.base_offset} does not follow offset {nxt}"
                )
            nxt = h.base_offset  # a gap left by compaction on the leader
            w.pieces.append(view[pos : pos + size])
            epoch, ts = h.partition_leader_epoch, h.max_timestamp
        elif append_time is not None:
            whole = bytearray(view[pos : pos + size])
            set_log_append_time(whole, append_time)
            patch_header(whole, nxt, leader_epoch)
            w.pieces.append(whole)
            epoch, ts = leader_epoch, append_time
        else:
            head = bytearray(view[pos : pos + HEADER_SIZE])
            patch_header(head, nxt, leader_epoch)
            w.pieces.append(head)
            w.pieces.append(view[pos + HEADER_SIZE : pos + size])
            epoch, ts = leader_epoch, h.max_timestamp
        if epoch > latest_epoch:
            w.new_epochs.append((epoch, nxt))
            latest_epoch = epoch
        last = nxt + h.last_offset_delta
        w.metas.append(BatchMeta(nxt, last, ts, size))
        if ts > w.max_timestamp:
            w.max_timestamp, w.offset_of_max_timestamp = ts, nxt
        w.records += h.record_count
        nxt = last + 1
    w.next_offset = nxt
    return w
