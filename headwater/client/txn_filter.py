"""The consumer's transaction filter: which fetched batches are delivered.

Pure logic (docs/transactions.md, "Last stable offset and read_committed fetches"), applied to
the batches of one fetch response in offset order:

* control batches (transaction markers, attribute bit 5) are never delivered — with
  read_uncommitted too;
* read_committed: the response's ``aborted_transactions`` (``(producer_id, first_offset)``,
  ascending by first_offset) feed a set of *aborted pids*: a pid joins the set when the next
  batch examined reaches the entry's ``first_offset`` (its last offset >= first_offset), and
  leaves it at that pid's ABORT marker; a transactional batch of a pid in the set is dropped.

Each response is filtered on its own, as Kafka's CompletedFetch: the broker lists every
aborted transaction overlapping the response (also those that began before the fetch offset),
so no state needs to cross responses. Dropped batches still advance the consumer's position.

Control record layout: key = 4 bytes ``u16 version, u16 type`` (0 ABORT, 1 COMMIT),
little-endian; value = 6 bytes ``u16 version, i32 coordinator_epoch``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from headwater.batch import RecordBatch
from headwater.batch.control import ABORT, CONTROL_KEY


def control_type(batch: RecordBatch) -> int | None:
    """ABORT / COMMIT of a control batch (None when its key cannot be read)."""
    keys = batch.keys()
    if not keys or keys[0] is None or len(keys[0]) < CONTROL_KEY.size:
        return None
    _version, kind = CONTROL_KEY.unpack_from(keys[0], 0)
    return int(kind)


def keep_flags(
    batches: Sequence[RecordBatch],
    aborted: Iterable[tuple[int, int]],
    *,
    read_committed: bool,
) -> list[bool]:
    """One flag per batch of one fetch response: True to deliver it (see module docstring)."""
    pending: list[tuple[int, int]] = [(first, pid) for pid, first in aborted]
    heapq.heapify(pending)
    active: set[int] = set()
    out: list[bool] = []
    for b in batches:
        h = b.header
        if read_committed:
            last = h.base_offset + h.last_offset_delta
            while pending and pending[0][0] <= last:
                _first, pid = heapq.heappop(pending)
                active.add(pid)
        if h.is_control:
            if read_committed and h.producer_id in active and control_type(b) == ABORT:
                active.discard(h.producer_id)
            out.append(False)
            continue
        if read_committed and h.is_transactional and h.producer_id in active:
            out.append(False)
            continue
        out.append(True)
    return out
