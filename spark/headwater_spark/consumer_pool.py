"""Per-Python-worker pool of idle read consumers, reused across tasks and micro-batches.

Spark's Kafka source keeps its consumers in a per-executor pool and reuses them across tasks
and micro-batches; a task that opened a consumer of its own would pay a connection, metadata
and the first fetch's set-up every time (64 times for 4 micro-batches of 16 partitions). Spark
reuses a Python worker process for many tasks (``spark.python.worker.reuse``, on by default),
so :func:`headwater_spark.reader.read_range` borrows its consumer from this module's pool, one
pool per worker process, living on the worker's loop (:mod:`headwater_spark.worker_loop`).

Contract:

* A consumer is borrowed for one read and handed back with :meth:`ConsumerPool.release`; while
  borrowed nobody else uses it. On release its assignment is cleared (its fetch tasks and
  buffered records dropped), so the next borrower starts from ``assign`` + ``seek`` with
  nothing left over; a read that failed hands it back with ``reusable=False`` and it is closed
  (its state is unknown).
* Idle consumers are keyed by :func:`key_of`: the bootstrap servers, isolation level, fetch
  size and the security options (TLS trust, client certificate, SCRAM credentials); a read
  only ever gets a consumer made for exactly its key.
* Bounded: at most ``max_idle`` idle consumers in all (the least recently used beyond that is
  closed), and one idle longer than ``idle_timeout_s`` is closed the next time the pool is
  used (Spark's Kafka pool: ``spark.kafka.consumer.cache.capacity`` 64, timeout 5 min).
* Closed at worker exit: an ``atexit`` hook closes the idle consumers when the interpreter exits
  normally. Spark ends forked daemon workers with ``os._exit``, which skips it; then the OS
  closes the sockets, and since these consumers hold manual assignments (no group membership)
  nothing is left behind on the brokers.

All methods except :meth:`ConsumerPool.stats` run on the worker loop (one thread), so the pool
needs no lock.
"""

from __future__ import annotations

import atexit
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable
from dataclasses import dataclass
from typing import Any

from headwater.client import AsyncConsumer
from headwater_spark.options import ExecutorConfig

log = logging.getLogger(__name__)

#: idle consumers kept per worker process, over every key
MAX_IDLE = 16
#: an idle consumer unused this long is closed (as Spark's Kafka consumer pool's 5 min)
IDLE_TIMEOUT_S = 300.0


def key_of(cfg: ExecutorConfig) -> Hashable:
    """What makes two reads' consumers interchangeable (everything the consumer is built from)."""
    return (cfg.bootstrap, cfg.isolation_level, cfg.fetch_max_bytes, cfg.security)


async def new_consumer(cfg: ExecutorConfig) -> AsyncConsumer:
    """A manually assigned consumer for ``cfg`` (no group, ``auto_offset_reset="none"``)."""
    return AsyncConsumer(
        cfg.bootstrap,
        auto_offset_reset="none",
        max_partition_fetch_bytes=cfg.fetch_max_bytes,
        max_buffer_bytes=4 * cfg.fetch_max_bytes,
        fetch_max_wait_ms=200,
        client_id="headwater-spark",
        isolation_level=cfg.isolation_level,
        security=cfg.security.client_security(),
    )


@dataclass(frozen=True)
class PoolStats:
    """Counts since the pool was made: consumers ``opened`` (made new), ``reused`` (borrowed
    idle), ``closed``, and ``idle`` now."""

    opened: int
    reused: int
    closed: int
    idle: int


class ConsumerPool:
    def __init__(
        self,
        factory: Callable[[ExecutorConfig], Coroutine[Any, Any, Any]] = new_consumer,
        *,
        max_idle: int = MAX_IDLE,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_idle < 0 or idle_timeout_s <= 0:
            raise ValueError("max_idle must be >= 0 and idle_timeout_s > 0")
        self._factory = factory
        self._max_idle = max_idle
        self._timeout = idle_timeout_s
        self._clock = clock
        #: idle consumers, least recently released first: id(consumer) -> (key, consumer, since)
        self._idle: OrderedDict[int, tuple[Hashable, Any, float]] = OrderedDict()
        self._opened = self._reused = self._closed = 0

    def stats(self) -> PoolStats:
        return PoolStats(self._opened, self._reused, self._closed, len(self._idle))

    async def acquire(self, cfg: ExecutorConfig) -> Any:
        """An idle consumer made for ``cfg``'s key (the most recently released), else a new one."""
        await self._expire()
        key = key_of(cfg)
        for ident in reversed(self._idle):
            if self._idle[ident][0] == key:
                _, consumer, _ = self._idle.pop(ident)
                self._reused += 1
                return consumer
        consumer = await self._factory(cfg)
        self._opened += 1
        return consumer

    async def release(self, cfg: ExecutorConfig, consumer: Any, *, reusable: bool = True) -> None:
        """Hand ``consumer`` back: kept idle with its assignment cleared, or closed when not
        ``reusable`` (the read failed) or when the pool is full."""
        if reusable:
            try:
                consumer.assign([])
            except Exception as exc:  # a consumer that cannot be reset is not reused
                log.warning("not reusing a consumer that failed to reset: %s", exc)
                reusable = False
        if not reusable or self._max_idle == 0:
            await self._close(consumer)
            return
        self._idle[id(consumer)] = (key_of(cfg), consumer, self._clock())
        while len(self._idle) > self._max_idle:
            _, (_, oldest, _) = self._idle.popitem(last=False)
            await self._close(oldest)
        await self._expire()

    async def close_all(self) -> None:
        """Close every idle consumer (borrowed ones are closed by their release)."""
        while self._idle:
            _, (_, consumer, _) = self._idle.popitem(last=False)
            await self._close(consumer)

    async def _expire(self) -> None:
        now = self._clock()
        for ident in [i for i, (_, _, since) in self._idle.items() if now - since > self._timeout]:
            _, consumer, _ = self._idle.pop(ident)
            await self._close(consumer)

    async def _close(self, consumer: Any) -> None:
        self._closed += 1
        try:
            await consumer.close()
        except Exception as exc:  # closing is best effort: the sockets go with the process
            log.warning("closing a pooled consumer failed: %s", exc)


#: this worker process's pool (used only on the worker loop)
POOL = ConsumerPool()


def _close_at_exit() -> None:
    from headwater_spark.worker_loop import run_if_started

    run_if_started(POOL.close_all(), timeout_s=10)


atexit.register(_close_at_exit)
