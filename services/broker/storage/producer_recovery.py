"""Rebuilding a partition's producer state and aborted-transaction indexes from disk.

Used by ``Log`` at open, after truncation and (through :func:`apply_batch`) for every batch
a follower appends. Called under the log's lock (or before the log is shared).

:func:`rebuild` loads the newest valid snapshot at or below the log end (``producer_snapshot``;
none: empty state), cuts every segment's txnindex to the entries whose marker lies below the
snapshot's offset, then replays the batch **headers** from that offset to the log end:
data batches only need the header; a control batch (120 bytes, ``headwater.batch.control``)
is read whole and parsed. Nothing is decompressed. An ABORT that closes a transaction
during the replay appends its entry to the txnindex of the segment holding the marker, so
the indexes end exactly as if the batches had just been appended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from headwater.batch.control import CONTROL_BATCH_SIZE, parse_control_batch
from headwater.batch.layout import ATTR_CONTROL, BatchHeader
from services.broker.storage import producer_snapshot
from services.broker.storage.producer_state import ProducerStateManager
from services.broker.storage.segment import LogSegment
from services.broker.storage.txn_index import AbortedTxn

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class Rebuilt:
    state: ProducerStateManager
    #: Offset of the snapshot the state started from (None: no usable snapshot).
    snapshot_offset: int | None
    #: Batches replayed on top of it.
    replayed_batches: int


def apply_batch(
    state: ProducerStateManager,
    view: Buffer,
    pos: int,
    h: BatchHeader,
    base_offset: int,
) -> AbortedTxn | None:
    """Apply one appended batch (``h`` at ``view[pos:]``, written at ``base_offset``) without
    validation; the txnindex entry it creates, if any. ``producer_id < 0``: nothing."""
    if h.producer_id < 0:
        return None
    if h.attributes & ATTR_CONTROL:
        record = parse_control_batch(view, pos)
        return state.apply_marker(
            h.producer_id, h.producer_epoch, record, base_offset, h.max_timestamp
        )
    state.apply_data(h, base_offset)
    return None


def rebuild(directory: Path, segments: Sequence[LogSegment], log_end: int) -> Rebuilt:
    """Producer state as of ``log_end`` (module doc); snapshots above it are deleted."""
    producer_snapshot.delete_above(directory, log_end)
    found = producer_snapshot.load_newest(directory, log_end)
    start = found[0] if found is not None else -1
    state = ProducerStateManager(found[1] if found is not None else ())
    replayed = 0
    for i, seg in enumerate(segments):
        seg.txn_index.truncate_from(start)
        seg_end = segments[i + 1].base_offset if i + 1 < len(segments) else log_end
        if seg_end <= start or seg.size == 0:
            continue
        pos = 0
        if seg.base_offset < start:
            at = seg.find_position(start, seg.size)
            if at is None:
                continue
            pos = at[0]
        for p, h in seg.headers_from(pos, seg.size):
            if h.base_offset < start:
                continue
            replayed += 1
            if h.producer_id < 0:
                continue
            raw = seg.read(p, CONTROL_BATCH_SIZE) if h.attributes & ATTR_CONTROL else b""
            aborted = apply_batch(state, raw, 0, h, h.base_offset)
            if aborted is not None:
                seg.txn_index.append(aborted)
    return Rebuilt(state, None if found is None else start, replayed)
