"""A producer batch: one partition's records, kept as columns until encoded, and its waiters.

:class:`ProducerBatch` keeps *columns* — ``values``, ``keys`` (created lazily, None while every
key is null), ``headers`` (lazily), timestamps (a single int while all are equal) — and is
encoded with exactly one :func:`headwater.batch.encode_batch_pieces` call when it is drained
(into ``pieces``, joined once by the sender into its request; values of ~1 KiB and more stay
pieces of their own, see :data:`PIECES_FROM_MEAN_SIZE`). It is
mutable until drained and owned by its :class:`headwater.client.accumulator.Accumulator`
(appends happen under the accumulator's lock).

Waiters: besides its :class:`headwater.client.record_future.BatchOutcome` (what
``RecordFuture`` reads), each batch holds ``(start, count, target)`` triples — ``target`` is an
``asyncio.Future`` for one record (``send``) or a :class:`Group` (a ``send_many`` call that may
span several batches and partitions). Record ``i`` of a batch acknowledged at base offset ``B``
has offset ``B + i``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from headwater.batch import Compression, encode_batch_pieces, parse_header, with_base_sequence
from headwater.client.record_future import BatchOutcome
from headwater.client.types import GroupMetadata, PartitionRange, TopicPartition

#: Estimated per-record bytes besides key and value (timestamp delta + two offsets).
RECORD_OVERHEAD = 12
#: Estimated batch bytes besides records (the 64-byte header plus padding).
BATCH_OVERHEAD = 128
#: From this mean value size up, a batch keeps its values as pieces of its own when encoded
#: (joined once, into the produce request) instead of joining them into the batch first: at
#: 1 KiB values that second 1 MiB copy, and the page faults of allocating it afresh, were
#: most of the sender's per-batch CPU (profiled, docs/benchmarks.md); for small values the
#: per-piece CRC calls cost more than the copy saves.
PIECES_FROM_MEAN_SIZE = 512

Header = tuple[str, bytes | None]


class Group:
    """The future of one ``send_many`` call: resolved when every piece is acknowledged."""

    __slots__ = ("_closed", "future", "pending", "ranges", "topic")

    def __init__(self, topic: str, future: asyncio.Future[GroupMetadata]) -> None:
        self.topic = topic
        self.future = future
        self.pending = 0
        self.ranges: list[PartitionRange] = []
        self._closed = False

    def add_piece(self) -> None:
        self.pending += 1

    def close_adding(self) -> None:
        """No more pieces will be added; resolve now if all are already done."""
        self._closed = True
        self._maybe_done()

    def piece_done(self, rng: PartitionRange) -> None:
        self.pending -= 1
        self.ranges.append(rng)
        self._maybe_done()

    def fail(self, exc: BaseException) -> None:
        self.pending -= 1
        if not self.future.done():
            self.future.set_exception(exc)

    def _maybe_done(self) -> None:
        if self._closed and self.pending == 0 and not self.future.done():
            self.future.set_result(GroupMetadata(self.topic, tuple(self.ranges)))


class ProducerBatch:
    """Records of one partition sent together (mutable until drained; owned by the loop).

    headwater/client/_cproduce.c reads and writes ``values``, ``keys``, ``headers``,
    ``timestamps``, ``ts_uniform``, ``count``, ``nbytes``, ``limit``, ``sealed`` and ``outcome``
    at their slot offsets (found by name when a producer starts): keep them ``__slots__`` members.
    """

    __slots__ = (
        "attempts",
        "base_seq",
        "count",
        "created",
        "done",
        "encoded_size",
        "headers",
        "keys",
        "limit",
        "nbytes",
        "outcome",
        "pieces",
        "pred_acked",
        "restamp",
        "retry_at",
        "retry_leader",
        "sealed",
        "timestamps",
        "tp",
        "ts_uniform",
        "values",
        "waiters",
    )

    def __init__(
        self, tp: TopicPartition, created: float, done: asyncio.Future[None], limit: int
    ) -> None:
        self.tp = tp
        self.created = created
        #: the estimated size (``nbytes``) this batch is sealed at: the producer's
        #: ``batch_size``, or less for a topic whose ``max.message.bytes`` is smaller
        self.limit = limit
        self.values: list[Any] = []
        self.keys: list[bytes | None] | None = None
        self.headers: list[Sequence[Header]] | None = None
        self.ts_uniform: int | None = None
        self.timestamps: list[int] | None = None
        self.count = 0
        self.nbytes = BATCH_OVERHEAD  # estimated encoded size (drives sealing)
        self.waiters: list[tuple[int, int, Any]] = []
        self.sealed = False
        #: the encoded batch as pieces (their concatenation is its bytes), set by encode()
        self.pieces: list[Any] | None = None
        self.encoded_size = 0
        self.attempts = 0
        self.retry_at = 0.0
        #: the broker the failed attempt went to (-1: none or not known): the retry backoff
        #: applies while that broker still leads the partition (``backing_off``)
        self.retry_leader = -1
        self.done = done
        self.base_seq = -1  # idempotence: assigned at drain time, kept across retries
        self.restamp = False  # base_seq moved after encoding (an earlier batch was dropped)
        self.pred_acked = False  # the predecessor was acknowledged when this was last sent
        self.outcome = BatchOutcome(tp, self.timestamp_at)

    def backing_off(self, now: float, leader: int) -> bool:
        """Whether a retry must still wait: before ``retry_at``, unless the partition's leader
        is now another broker than the one the failed attempt went to (Kafka's KIP-951: a
        retry to a new leader is sent at once; the backoff is for the broker that failed)."""
        return self.retry_at > now and (self.retry_leader < 0 or self.retry_leader == leader)

    @property
    def reserved(self) -> int:
        """Buffer memory held by this batch's records: every append reserves the bytes it
        adds to the estimate, so it is the estimate less the batch overhead."""
        return self.nbytes - BATCH_OVERHEAD

    def _add_timestamps(self, ts: int, n: int) -> None:
        if self.timestamps is None:
            if self.count == 0:
                self.ts_uniform = ts
                return
            if ts == self.ts_uniform:
                return
            self.timestamps = [self.ts_uniform or 0] * self.count
        self.timestamps.extend([ts] * n if n != 1 else (ts,))

    def timestamp_at(self, index: int) -> int:
        if self.timestamps is not None:
            return self.timestamps[index]
        return self.ts_uniform if self.ts_uniform is not None else -1

    def append(
        self,
        value: Any,
        key: bytes | None,
        headers: Sequence[Header] | None,
        ts: int,
        nbytes: int,
        target: Any,
    ) -> None:
        i = self.count
        self._add_timestamps(ts, 1)
        self.values.append(value)
        if key is not None:
            if self.keys is None:
                self.keys = [None] * i
            self.keys.append(key)
        elif self.keys is not None:
            self.keys.append(None)
        if headers:
            if self.headers is None:
                self.headers = [()] * i
            self.headers.append(headers)
        elif self.headers is not None:
            self.headers.append(())
        self.count = i + 1
        self.nbytes += nbytes
        self.waiters.append((i, 1, target))

    def append_many(
        self,
        values: Sequence[Any],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Sequence[Header]] | None,
        ts: int,
        nbytes: int,
        target: Any,
    ) -> None:
        i, n = self.count, len(values)
        self._add_timestamps(ts, n)
        self.values.extend(values)
        if keys is not None:
            if self.keys is None:
                self.keys = [None] * i
            self.keys.extend(keys)
        elif self.keys is not None:
            self.keys.extend([None] * n)
        if headers is not None:
            if self.headers is None:
                self.headers = [()] * i
            self.headers.extend(headers)
        elif self.headers is not None:
            self.headers.extend([()] * n)
        self.count = i + n
        self.nbytes += nbytes
        self.waiters.append((i, n, target))

    @property
    def encoded(self) -> bytes | None:
        """The encoded batch's bytes (joined from :attr:`pieces`; None before encode())."""
        return None if self.pieces is None else b"".join(self.pieces)

    def encode(
        self, compression: Compression, producer: tuple[int, int, bool] | None = None
    ) -> list[Any]:
        """The batch's bytes as pieces, header first (encoded once; retries resend the same
        bytes); ``encoded_size`` is their total length.

        ``producer`` = (producer_id, epoch, transactional) for an idempotent producer, with
        ``base_seq`` already assigned; the header carries them inside the CRC. A batch marked
        ``restamp`` (its sequence moved down: ``idempotence.Sequencer.drop``) is re-stamped
        with its current ``base_seq``.
        """
        if self.pieces is not None:
            if self.restamp:
                self.pieces = [with_base_sequence(b"".join(self.pieces), self.base_seq)]
                self.restamp = False
            return self.pieces
        ts: Any = self.timestamps if self.timestamps is not None else self.ts_uniform
        pid, epoch, txn = producer if producer is not None else (-1, -1, False)
        self.pieces = pieces = encode_batch_pieces(
            self.values,
            self.keys,
            headers=self.headers,
            timestamps=ts,
            compression_type=compression,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=self.base_seq if producer is not None else -1,
            transactional=txn,
            values_as_pieces=self.nbytes >= PIECES_FROM_MEAN_SIZE * self.count,
        )
        self.encoded_size = parse_header(pieces[0]).total_size  # not len() per value piece
        # the columns are no longer needed (the pieces may hold the values themselves); keep
        # what resolving futures reads
        self.values = []
        self.keys = None
        self.headers = None
        return pieces
