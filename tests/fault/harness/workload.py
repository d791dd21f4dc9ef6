"""Clients that record a history: producer processes, and the final reader.

Producer processes (Jepsen's "processes"): ``processes`` asyncio tasks share one
:class:`AsyncProducer` (so their records share batches and requests). Each writes unique
values ``"<prefix>-<n>"`` one at a time, round-robin over its partitions, and *awaits each
acknowledgement* before its next write — so the checker may demand that one process's
acknowledged writes to a partition sit at increasing offsets. The producer runs with
``retries=0``: every operation is exactly one attempt, so its error says what happened to that
attempt and nothing else.

Classification of a failed write:

* ``fail`` (definitely not written): the error was raised by ``send`` itself (nothing was
  handed to the producer), or the broker answered a code it only returns *before* appending
  (:data:`DEFINITE`: NOT_ENOUGH_REPLICAS, MESSAGE_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION, ...);
* ``info`` (unknown) otherwise: timeouts, network errors, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
  NOT_LEADER_OR_FOLLOWER (a leader deposed while an acks=all write waited for its followers
  answers it after the append, as Kafka does) — the write may or may not be in the log.

With ``acks=0`` nothing is acknowledged: completions are recorded as ``info``.

The final reader consumes every partition from the beginning up to its high watermark (the
end offset ListOffsets reports) through the normal consumer.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from headwater import errors
from headwater.client import AsyncConsumer, AsyncProducer, TopicPartition
from headwater.v1.errors_pb2 import ErrorCode
from tests.fault.harness.checker import Read
from tests.fault.harness.history import History

log = logging.getLogger(__name__)

#: Codes a broker returns only before appending anything: a write answered with one of these
#: definitely did not happen.
DEFINITE: frozenset[int] = frozenset(
    {
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.INVALID_REQUIRED_ACKS,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.INVALID_TIMESTAMP,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)


def classify(exc: BaseException) -> tuple[str, str]:
    """(``"fail"`` or ``"info"``, error text) for the exception an acknowledgement raised."""
    if isinstance(exc, errors.HeadwaterError):
        from headwater.client import errors as client_errors

        client_side = type(exc).__module__ == client_errors.__name__
        if not client_side and exc.code in DEFINITE:
            return "fail", exc.code_name()
        return "info", f"{exc.code_name()}: {exc.message}"[:200]
    return "info", f"{type(exc).__name__}: {exc}"[:200]


@dataclass
class WorkloadStats:
    ok: int = 0
    fail: int = 0
    info: int = 0


class ProducerWorkload:
    """Producer processes writing to ``topic`` (see module doc). ``processes`` ids start at
    ``first_process``; ``partitions`` defaults to all of the topic's."""

    def __init__(
        self,
        history: History,
        bootstrap: str,
        topic: str,
        *,
        partitions: Sequence[int],
        processes: int = 4,
        acks: int | str = "all",
        request_timeout_ms: int = 4000,
        prefix: str = "w",
        first_process: int = 0,
        metadata_max_age_ms: int = 1000,
        delay_s: float = 0.0,
    ) -> None:
        self.history = history
        self.topic = topic
        self.partitions = list(partitions)
        self.processes = processes
        self.first_process = first_process
        self.prefix = prefix
        self.acks = acks
        self.delay_s = delay_s  # pause after each acknowledged write (rate limit)
        self.stats = WorkloadStats()
        self._counter = itertools.count()
        self._producer = AsyncProducer(
            bootstrap,
            acks=acks,
            retries=0,
            linger_ms=1,
            request_timeout_ms=request_timeout_ms,
            delivery_timeout_ms=request_timeout_ms * 3,
            metadata_max_age_ms=metadata_max_age_ms,
        )

    async def run(self, stop: asyncio.Event, *, max_writes: int | None = None) -> WorkloadStats:
        """Write until ``stop`` is set (or ``max_writes`` were invoked), then close."""
        try:
            await asyncio.gather(
                *(
                    self._process(self.first_process + i, i, stop, max_writes)
                    for i in range(self.processes)
                )
            )
        finally:
            await self._producer.close(timeout_s=10)
        return self.stats

    async def _process(self, pid: int, k: int, stop: asyncio.Event, max_writes: int | None) -> None:
        turn = k
        while not stop.is_set():
            n = next(self._counter)
            if max_writes is not None and n >= max_writes:
                return
            partition = self.partitions[turn % len(self.partitions)]
            turn += 1
            value = f"{self.prefix}-{n}"
            inv = self.history.invoke(pid, "produce", value, partition)
            try:
                fut = await self._producer.send(self.topic, value.encode(), partition=partition)
            except Exception as exc:  # never handed to the producer: definitely not written
                self.history.complete(inv, "fail", error=f"{type(exc).__name__}: {exc}"[:200])
                self.stats.fail += 1
                await asyncio.sleep(0.05)
                continue
            try:
                meta = await fut
            except Exception as exc:
                kind, text = classify(exc)
                self.history.complete(inv, kind, error=text)  # type: ignore[arg-type]
                if kind == "fail":
                    self.stats.fail += 1
                else:
                    self.stats.info += 1
                await asyncio.sleep(0.2)  # errors come fast during a failover: back off a bit
                continue
            if str(self.acks) == "0":
                self.history.complete(inv, "info", error="acks=0")
                self.stats.info += 1
            else:
                self.history.complete(inv, "ok", offset=meta.offset)
                self.stats.ok += 1
            if self.delay_s:
                await asyncio.sleep(self.delay_s)


async def read_all(
    bootstrap: str, topic: str, partitions: Sequence[int], *, timeout: float = 30.0
) -> tuple[list[Read], dict[int, int]]:
    """Every record of ``partitions`` from the beginning up to each high watermark, as seen by
    a consumer; returns (reads, high watermarks)."""
    tps = [TopicPartition(topic, p) for p in partitions]
    consumer = AsyncConsumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    reads: list[Read] = []
    try:
        ends = await asyncio.wait_for(consumer.end_offsets(tps), timeout)
        hws = {tp.partition: off for tp, off in ends.items()}
        consumer.assign([tp for tp in tps if hws[tp.partition] > 0])
        if not consumer.assignment():
            return reads, hws
        await consumer.seek_to_beginning(*consumer.assignment())
        pos = {tp.partition: 0 for tp in consumer.assignment()}

        async def drain() -> None:
            while any(pos[p] < hws[p] for p in pos):
                for fb in await consumer.poll_batches(timeout_ms=200):
                    p = fb.tp.partition
                    for off, v in zip(fb.offsets().tolist(), fb.values(), strict=True):
                        if off < hws[p]:
                            reads.append(Read("consumer", p, int(off), _text(v)))
                        pos[p] = max(pos[p], int(off) + 1)

        await asyncio.wait_for(drain(), timeout)
    finally:
        await consumer.close()
    return reads, hws


def _text(v: bytes | None) -> str:
    return "<null>" if v is None else bytes(v).decode(errors="replace")
