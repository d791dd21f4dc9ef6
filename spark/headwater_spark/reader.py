"""Executor side: read one :class:`~headwater_spark.planning.OffsetRange` through the
client's fetch stream and yield Spark rows as Arrow batches.

Runs in a Spark Python worker (the driver does not import it); a task reads its ranges
with :func:`read_ranges`; imports only the client library (``headwater.client``,
``headwater.batch``), never ``services``. Client calls run on the worker's one loop
(:mod:`headwater_spark.worker_loop`). Each call borrows one
:class:`headwater.client.AsyncConsumer` (manual assignment, ``auto_offset_reset="none"``) from
the worker's pool (:mod:`headwater_spark.consumer_pool`) and hands it back when the generator
finishes or is closed (closed instead when the read failed).

Contract: exactly the records of the range's partition with ``start <= offset < end`` are
yielded, in offset order. Offsets below the log start (deleted by retention) are data loss:
with ``failOnDataLoss`` a :class:`DataLossError` is raised, otherwise a warning is logged and
reading continues at the log start. Offsets that never arrive within ``pollTimeoutMs`` are
treated the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from headwater.client import AsyncConsumer, FetchedBatch
from headwater.client.fetched import first_index_at
from headwater.errors import OffsetOutOfRangeError
from headwater_spark import arrow
from headwater_spark.consumer_pool import POOL
from headwater_spark.options import ExecutorConfig
from headwater_spark.planning import OffsetRange
from headwater_spark.resolver import DataLossError
from headwater_spark.worker_loop import run as _run

log = logging.getLogger(__name__)

POLL_SLICE_MS = 1_000


async def _assign(consumer: AsyncConsumer, tp: Any, offset: int) -> None:
    consumer.assign([tp])
    consumer.seek(tp, offset)


def _clip(fb: FetchedBatch, end: int) -> FetchedBatch | None:
    stop = min(fb.stop, first_index_at(fb.batch, end))
    if stop <= fb.start:
        return None
    return fb if stop == fb.stop else FetchedBatch(fb.tp, fb.batch, fb.start, stop)


def read_ranges(cfg: ExecutorConfig, ranges: Sequence[OffsetRange]) -> Iterator[Any]:
    """Yield the records of one task's ranges, one range after the other (each as
    :func:`read_range`; the pool hands the next range the consumer the last one returned)."""
    for r in ranges:
        yield from read_range(cfg, r)


def read_range(cfg: ExecutorConfig, r: OffsetRange) -> Iterator[Any]:
    """Yield the range's records: Arrow batches (``arrow_batches``) or row tuples."""
    if r.end <= r.start:
        return
    consumer = _run(POOL.acquire(cfg))
    reusable = False
    try:
        yield from _read_with(consumer, cfg, r)
        reusable = True
    except GeneratorExit:  # the task stopped early (e.g. a limit): the consumer is sound
        reusable = True
        raise
    finally:
        _run(POOL.release(cfg, consumer, reusable=reusable))


def _read_with(consumer: AsyncConsumer, cfg: ExecutorConfig, r: OffsetRange) -> Iterator[Any]:
    tp = r.tp
    _run(_assign(consumer, tp, r.start))
    pos = r.start
    deadline = time.monotonic() + cfg.poll_timeout_ms / 1000
    while pos < r.end:
        try:
            fetched = _run(consumer.poll_batches(timeout_ms=POLL_SLICE_MS))
        except OffsetOutOfRangeError:
            log_start = _run(consumer.beginning_offsets([tp]))[tp]
            if pos >= log_start:
                raise
            _lost(cfg, r, f"offsets {pos}..{log_start - 1} were deleted before being read")
            if log_start >= r.end:
                return
            pos = log_start
            _run(_assign(consumer, tp, pos))
            continue
        pieces = [c for c in (_clip(fb, r.end) for fb in fetched) if c is not None]
        pos = _run(consumer.position(tp))
        if pieces:
            deadline = time.monotonic() + cfg.poll_timeout_ms / 1000
            if cfg.arrow_batches:
                spark_batches = [arrow.to_spark_batch(p, cfg.include_headers) for p in pieces]
                yield from arrow.coalesce(spark_batches)
            else:
                for p in pieces:
                    yield from arrow.to_rows(p, cfg.include_headers)
        elif time.monotonic() > deadline:
            _lost(cfg, r, f"offsets {pos}..{r.end - 1} did not arrive within pollTimeoutMs")
            return


def _lost(cfg: ExecutorConfig, r: OffsetRange, what: str) -> None:
    msg = (
        f"{r.topic}[{r.partition}] range {r.start}..{r.end - 1}: {what} (data loss). "
        "Set failOnDataLoss=false to skip them."
    )
    if cfg.fail_on_data_loss:
        raise DataLossError(msg)
    log.warning("%s; skipping (failOnDataLoss=false)", msg)
