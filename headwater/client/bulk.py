"""The producer's bulk path: a list of records handed to ``AsyncProducer.send_many``.

Per-record Python work is kept to nothing: :func:`record_sizes` estimates every record's size
with numpy (one pass per column); :class:`BulkAppender` cuts the list into batch-sized runs
with a cumulative sum and ``searchsorted`` and hands each run to the accumulator by slicing
(:meth:`headwater.client.accumulator.Accumulator.append_many`). Keyed records are grouped by
partition with one stable argsort (records of a partition keep their order); unkeyed ones
follow the sticky partitioner, which moves on when a batch fills. Records are encoded a batch
at a time when the sender drains them.

Runs on the producer's loop (as every ``AsyncProducer`` method but ``produce``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from headwater import errors
from headwater.client import partitioner as partitioners
from headwater.client.accumulator import RECORD_OVERHEAD, Accumulator, Group, Header
from headwater.client.types import GroupMetadata, TopicPartition

_BYTES = (bytes, bytearray, memoryview)


def check_bytes(what: str, v: Any) -> None:
    """TypeError unless ``v`` (a record's key or value) is bytes-like or None."""
    if v is not None and not isinstance(v, _BYTES):
        raise TypeError(f"{what} must be bytes, bytearray, memoryview or None, not {type(v)}")


class BulkAppender:
    """Appends a group of records of one topic to the accumulator (see module doc).

    ``check_open`` is called after every wait for buffer memory: it raises when the producer
    was closed or failed meanwhile.
    """

    def __init__(
        self,
        acc: Accumulator,
        partitioner: partitioners.Partitioner,
        max_request_size: int,
        check_open: Callable[[], None],
    ) -> None:
        self._acc = acc
        self.partitioner = partitioner
        self.max_request_size = max_request_size
        self._sticky = (
            partitioner if isinstance(partitioner, partitioners.StickyPartitioner) else None
        )
        self._check_open = check_open

    async def add(
        self,
        topic: str,
        tps: list[TopicPartition],
        values: Sequence[Any],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Sequence[Header]] | None,
        ts: int,
        partition: int | None,
    ) -> asyncio.Future[GroupMetadata]:
        """Append every record as one group (timestamp ``ts``) to ``partition`` when given,
        else as the partitioner places them; awaits buffer memory. Returns the group's
        future once every record is buffered (``AsyncProducer.send_many`` doc).

        Raises InvalidRequestError when ``keys``/``headers`` are not parallel to ``values``,
        MessageTooLargeError for a record over ``max_request_size``,
        UnknownTopicOrPartitionError for a partition outside ``tps`` (nothing appended)."""
        count = len(values)
        for what, col in (("keys", keys), ("headers", headers)):
            if col is not None and len(col) != count:
                raise errors.InvalidRequestError(f"{len(col)} {what} for {count} values")
        loop = asyncio.get_running_loop()
        group = Group(topic, loop.create_future())
        if count == 0:
            group.close_adding()
            return group.future
        sizes = record_sizes(values, keys, headers)
        if int(sizes.max()) > self.max_request_size:
            raise errors.MessageTooLargeError(
                f"a record of ~{int(sizes.max())} bytes exceeds "
                f"max_request_size={self.max_request_size}"
            )
        n = len(tps)
        if partition is not None:
            if not 0 <= partition < n:
                raise errors.UnknownTopicOrPartitionError(
                    f"partition {partition} of {topic!r} does not exist ({n} partitions)"
                )
            await self._append_run(tps[partition], values, keys, headers, sizes, ts, group)
        elif keys is None and self._sticky is not None:
            await self._append_sticky(topic, tps, values, headers, sizes, ts, group)
        else:
            await self._append_partitioned(topic, tps, values, keys, headers, sizes, ts, group)
        group.close_adding()
        return group.future

    async def _append_run(
        self,
        tp: TopicPartition,
        values: Sequence[Any],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Sequence[Header]] | None,
        sizes: np.ndarray,
        ts: int,
        group: Group,
        *,
        sticky_topic: str | None = None,
        tps: list[TopicPartition] | None = None,
    ) -> None:
        """Append ``values`` cut into runs that fill batches; sticky mode re-picks the tp."""
        acc = self._acc
        assert acc is not None
        cum = np.zeros(len(values) + 1, dtype=np.int64)
        np.cumsum(sizes, out=cum[1:])
        i, total = 0, len(values)
        while i < total:
            if sticky_topic is not None and self._sticky is not None and tps is not None:
                tp = tps[self._sticky.sticky_partition(sticky_topic, len(tps))]
            room = acc.room(tp)
            j = int(np.searchsorted(cum, cum[i] + room, side="right")) - 1
            if j <= i:
                if acc.has_open_records(tp):
                    acc.seal_open(tp)
                    continue
                j = i + 1  # one record larger than a batch gets a batch of its own
            nbytes = int(cum[j] - cum[i])
            if not acc.try_reserve(nbytes):
                await acc.reserve(nbytes)
                self._check_open()
            acc.append_many(
                tp,
                values[i:j],
                None if keys is None else keys[i:j],
                None if headers is None else headers[i:j],
                ts,
                nbytes,
                group,
            )
            i = j

    async def _append_sticky(
        self,
        topic: str,
        tps: list[TopicPartition],
        values: Sequence[Any],
        headers: Sequence[Sequence[Header]] | None,
        sizes: np.ndarray,
        ts: int,
        group: Group,
    ) -> None:
        await self._append_run(
            tps[0], values, None, headers, sizes, ts, group, sticky_topic=topic, tps=tps
        )

    async def _append_partitioned(
        self,
        topic: str,
        tps: list[TopicPartition],
        values: Sequence[Any],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Sequence[Header]] | None,
        sizes: np.ndarray,
        ts: int,
        group: Group,
    ) -> None:
        n = len(tps)
        fn = self.partitioner
        if keys is None:
            parts = np.fromiter((fn(None, n, topic) for _ in values), np.int64, len(values))
        elif isinstance(fn, partitioners.DefaultPartitioner) and None not in keys:
            crc = partitioners.crc32c
            parts = np.fromiter((crc(k) for k in keys), np.int64, len(keys)) % n  # type: ignore[arg-type]
        else:
            parts = np.fromiter((fn(k, n, topic) for k in keys), np.int64, len(keys))
        if len(parts) and (int(parts.min()) < 0 or int(parts.max()) >= n):
            raise errors.UnknownTopicOrPartitionError(
                f"partitioner returned a partition outside 0..{n - 1} for {topic!r}"
            )
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        bounds = np.flatnonzero(np.diff(sorted_parts)) + 1
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), len(parts)]
        for s, e in zip(starts, ends, strict=True):
            idx = order[s:e].tolist()
            pick = _picker(idx)
            await self._append_run(
                tps[int(sorted_parts[s])],
                pick(values),
                None if keys is None else pick(keys),
                None if headers is None else pick(headers),
                sizes[order[s:e]],
                ts,
                group,
            )


def _picker(idx: list[int]) -> Callable[[Sequence[Any]], list[Any]]:
    if len(idx) == 1:
        return lambda seq: [seq[idx[0]]]
    getter = itemgetter(*idx)
    return lambda seq: list(getter(seq))


def _lengths(col: Sequence[Any], what: str) -> np.ndarray:
    try:
        return np.fromiter(map(len, col), dtype=np.int64, count=len(col))
    except TypeError:
        for v in col:
            check_bytes(what, v)
        return np.fromiter((0 if v is None else len(v) for v in col), np.int64, len(col))


def record_sizes(
    values: Sequence[Any],
    keys: Sequence[Any] | None,
    headers: Sequence[Sequence[Header]] | None,
) -> np.ndarray:
    """Estimated bytes per record (value + key + headers + overhead), one numpy pass each."""
    sizes = _lengths(values, "value") + RECORD_OVERHEAD
    if keys is not None:
        sizes += _lengths(keys, "key")
    if headers is not None:
        sizes += np.fromiter(
            (sum(len(k) + len(v or b"") + 12 for k, v in h) if h else 0 for h in headers),
            np.int64,
            len(headers),
        )
    return sizes
