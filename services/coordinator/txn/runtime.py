"""One owned partition of ``__transaction_state``: its TxnTable, handlers and marker tasks.

:class:`TxnRuntime` is a :class:`~services.coordinator.log_runtime.LogRuntime` (one task per
owned partition: epoch marker, replay, append-then-read-back before answering, fencing) whose
table is a :class:`TxnTable` and whose requests are the transaction coordinator's (the
protobuf requests of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions, and the internal ``MarkerJob`` of a completed
marker task). Handlers are pure and registered by request type (``txn.handlers.HANDLERS``);
producer ids they need are allocated here first (``ProducerIdAllocator``, etcd).

Marker tasks (``txn-markers-<transactional id>``, at most one per id) are started by this
task after a Prepare* record is durable — by EndTxn, by a fencing InitProducerId, by the
timeout tick, and at load for every Prepare* transaction replayed — and run
:meth:`MarkerWriter.write`; when it returns they ``post`` their ``MarkerJob`` back to this
task, whose handler (``complete``) persists Complete* and answers the parked EndTxn. They
touch no state of the runtime and are cancelled when it stops (the next owner restarts them
from the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from headwater.client import AsyncProducer
from headwater.platform import etcd as hetcd
from headwater.platform.producer_ids import ProducerIdAllocator
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator.log_runtime import LogRuntime, Request
from services.coordinator.outcome import Outcome
from services.coordinator.txn import handlers as h
from services.coordinator.txn.markers import MarkerWriter
from services.coordinator.txn.state import MAX_EPOCH, TxnState, TxnTable

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"


def not_coordinator(request: object) -> Any:
    """The in-band NOT_COORDINATOR answer to ``request`` (raises PartitionLostError for an
    internal one)."""
    return h.HANDLERS.error(request, ErrorCode.NOT_COORDINATOR, "not the transaction coordinator")


class TxnRuntime(LogRuntime[TxnTable]):
    """See the module docstring. Create, then run :meth:`run` as a task."""

    def __init__(
        self,
        *,
        partition: int,
        epoch: int,
        coordinator_id: int,
        producer: AsyncProducer,
        bootstrap: str,
        allocator: ProducerIdAllocator,
        markers: MarkerWriter,
        max_timeout_ms: int = h.DEFAULT_MAX_TIMEOUT_MS,
        topic: str = TXN_TOPIC,
        append_timeout_s: float = 15.0,
    ) -> None:
        super().__init__(
            partition=partition,
            epoch=epoch,
            coordinator_id=coordinator_id,
            producer=producer,
            bootstrap=bootstrap,
            topic=topic,
            table=TxnTable(),
            append_timeout_s=append_timeout_s,
        )
        self._allocator = allocator
        self._markers = markers
        self._max_timeout_ms = max_timeout_ms
        self._jobs: dict[str, tuple[h.MarkerJob, asyncio.Task[bool]]] = {}
        self._handlers = h.HANDLERS.copy()
        self._handlers.replace(h.MarkerJob, self._complete)

    # ------------------------------------------------------------ hooks

    def _not_coordinator(self, request: object) -> Any:
        return not_coordinator(request)

    def _summary(self) -> str:
        return f"{len(self._table.txns)} transactional ids"

    def _on_loaded(self) -> None:
        for job in h.preparing_jobs(self._table):
            log.info("txn %s: finishing %s after load", job.transactional_id, job)
            self._start(job)

    def _on_stop(self) -> None:
        for _job, task in self._jobs.values():
            task.cancel()
        self._jobs.clear()

    def _ctx(self, new_pid: int = -1) -> h.TxnCtx:
        return h.TxnCtx(
            now_ms=int(time.time() * 1000),
            epoch=self.epoch,
            max_timeout_ms=self._max_timeout_ms,
            new_producer_id=new_pid,
        )

    async def _new_pid(self, request: object) -> int:
        return await self._allocator.next_id() if h.needs_new_pid(self._table, request) else -1

    async def _periodic(self) -> None:
        now = int(time.time() * 1000)
        near_max = any(
            m.state is TxnState.ONGOING
            and m.start_ms + m.timeout_ms <= now
            and m.producer_epoch + 1 >= MAX_EPOCH
            for m in self._table.txns.values()
        )
        try:
            pid = await self._allocator.next_id() if near_max else -1
        except hetcd.EtcdError as exc:
            log.warning("producer id allocation failed: %s", exc)
            pid = -1
        out, jobs = h.tick(self._table, self._ctx(pid))
        for job in jobs:
            log.info("txn %s timed out: aborting", job.transactional_id)
        await self._commit(out)
        for job in jobs:
            self._start(job)

    async def _handle(self, req: Request) -> None:
        r = req.request
        try:
            pid = await self._new_pid(r)
        except hetcd.EtcdError as exc:
            msg = f"producer id allocation failed: {exc}"
            answer = self._handlers.error(r, ErrorCode.COORDINATOR_NOT_AVAILABLE, msg)
            await self._commit(Outcome(response=answer), req)
            return
        out, jobs = self._handlers.handle(self._table, r, self._ctx(pid))
        await self._commit(out, req)
        for job in jobs:
            self._start(job)
        if isinstance(r, h.TXN_REQUESTS):
            self._ensure_job(r.transactional_id)

    def _complete(self, table: TxnTable, job: h.MarkerJob, ctx: h.TxnCtx) -> h.Result:
        """The handler of a finished marker task's job: ``complete``, and forget the task."""
        out, jobs = h.complete(table, job, ctx)
        running = self._jobs.get(job.transactional_id)
        if running is not None and running[0] == job:
            self._jobs.pop(job.transactional_id, None)
        if not out.records:
            meta = table.txns.get(job.transactional_id)
            log.warning(
                "txn %s: completion of %s dropped: the table holds %s",
                job.transactional_id, job, meta,
            )  # fmt: skip
        return out, jobs

    # ------------------------------------------------------------ marker tasks

    def _start(self, job: h.MarkerJob) -> None:
        running = self._jobs.get(job.transactional_id)
        if running is not None and running[0] == job and not running[1].done():
            return
        if running is not None:
            running[1].cancel()
        task = asyncio.create_task(self._write(job), name=f"txn-markers-{job.transactional_id}")
        self._jobs[job.transactional_id] = (job, task)

    def _ensure_job(self, txn_id: str) -> None:
        """A Prepare* transaction must always have its marker task running (its
        requests answer CONCURRENT_TRANSACTIONS until it completes); restart it if not.
        Never expected to act: it logs loudly when it does."""
        meta = self._table.txns.get(txn_id)
        if meta is None or not meta.state.preparing:
            return
        job = h.job_of(meta)
        running = self._jobs.get(txn_id)
        if running is None or running[0] != job or _failed(running[1]):
            log.warning("txn %s: %s had no marker task; restarting it", txn_id, meta.state.value)
            self._start(job)

    async def _write(self, job: h.MarkerJob) -> bool:
        """True once ``complete`` is posted; False when the write failed (logged; the next
        request of the transactional id restarts the task, :meth:`_ensure_job`)."""
        try:
            await self._markers.write(job, self.epoch)
        except asyncio.CancelledError:
            raise
        except Exception:  # never expected: write retries everything
            log.exception("txn %s: marker task failed", job.transactional_id)
            return False
        with contextlib.suppress(RuntimeError):
            self.post(job)
        return True


def _failed(task: asyncio.Task[bool]) -> bool:
    """The marker task ended without posting its completion."""
    return task.done() and (task.cancelled() or task.exception() is not None or not task.result())
