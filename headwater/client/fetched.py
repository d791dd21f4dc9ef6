"""FetchedBatch: a slice of one decoded record batch handed out by the consumer.

A batch from the broker may begin before the consumer's position (the broker serves whole
batches) and ``poll(max_records=...)`` may stop inside one; ``start``/``stop`` are record
*indexes* into the batch delimiting what belongs to this poll. The column accessors apply
the slice; ``batch`` is the whole :class:`headwater.batch.RecordBatch` (its bytes are the
bytes the producer sent).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from headwater.batch import RecordBatch
from headwater.batch.decode_loops import rows
from headwater.batch.layout import ATTR_HAS_OFFSET_DELTAS
from headwater.client.types import ConsumerRecord, TopicPartition


def first_index_at(batch: RecordBatch, offset: int) -> int:
    """Index of the first record of ``batch`` whose offset is >= ``offset``."""
    h = batch.header
    if offset <= h.base_offset:
        return 0
    if not h.attributes & ATTR_HAS_OFFSET_DELTAS:
        return min(offset - h.base_offset, h.record_count)
    return int(np.searchsorted(batch.offsets(), offset, side="left"))


def offset_at(batch: RecordBatch, index: int) -> int:
    """Offset of record ``index`` (``next_offset`` when ``index`` is the record count)."""
    h = batch.header
    if index >= h.record_count:
        return h.next_offset
    if not h.attributes & ATTR_HAS_OFFSET_DELTAS:
        return h.base_offset + index
    return int(batch.offsets()[index])


class FetchedBatch(NamedTuple):
    tp: TopicPartition
    batch: RecordBatch
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.batch.header.record_count

    def offsets(self) -> np.ndarray:
        return self.batch.offsets()[self.start : self.stop]

    def timestamps(self) -> np.ndarray:
        return self.batch.timestamps()[self.start : self.stop]

    def values(self) -> list[bytes | None]:
        return self.batch.values(self.start, self.stop)

    def keys(self) -> list[bytes | None]:
        return self.batch.keys(self.start, self.stop)

    def headers(self) -> list[tuple[tuple[str, bytes | None], ...]]:
        return self.batch.headers(self.start, self.stop)

    def to_arrow(self) -> Any:
        rb = self.batch.to_arrow()
        return rb if self.whole else rb.slice(self.start, self.stop - self.start)

    def records(self) -> list[ConsumerRecord]:
        """The slice's records as :class:`ConsumerRecord` (built column by column, without a
        Python call per record: decode_loops.rows)."""
        columns = (
            self.offsets().tolist(),
            self.timestamps().tolist(),
            self.keys(),
            self.values(),
            self.headers(),
        )
        return rows(ConsumerRecord, tuple(self.tp), columns)


def records_of(batches: Iterable[FetchedBatch]) -> list[ConsumerRecord]:
    """The records of ``batches`` in order, as :class:`ConsumerRecord`."""
    out: list[ConsumerRecord] = []
    for fb in batches:
        out.extend(fb.records())
    return out
