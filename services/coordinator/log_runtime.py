"""The machinery shared by every coordinator partition runtime: one owned partition of an
internal compacted topic (``__consumer_offsets``, ``__transaction_state``), its table replayed
from the log, a tail reader and a request queue.

:class:`LogRuntime` runs as ONE asyncio task (``<name>-<p>-e<epoch>``) that owns everything
mutable of the partition: the table, the parked requests and the tail consumer. Other tasks
talk to it only through :meth:`LogRuntime.submit` (a queue) of typed requests (a protobuf
request or an internal dataclass; each type has one handler, registered by type: handlers.py).

Lifecycle:

1. **load**: assign the tail consumer to the partition from the beginning, append an epoch
   marker (acks=all) with the producer, replay every committed record (the consumer only
   receives records below the high watermark), each decoded to its typed record by
   ``table.decode`` and applied by ``table.apply``, until the marker itself has been applied;
   requests submitted meanwhile wait in the queue; then :meth:`_on_loaded`;
2. **serve**: one request at a time: :meth:`_handle` runs the request type's pure handler to
   get an :class:`Outcome` and passes it to :meth:`_commit`, which appends the outcome's typed
   records (acks=all, one producer, in order), reads the tail — the same decode and
   ``table.apply`` as the load — until the replayed position passes the last appended offset,
   then answers (or parks the request under ``Outcome.wait``) and
   answers parked requests named in ``Outcome.replies``. Every ``TICK_S``
   :meth:`_periodic` runs (timers) the same way;
3. **stop** (released by ownership, fenced, or a failed append): :meth:`_on_stop`, then every
   queued and parked request is answered by :meth:`_not_coordinator`. Fencing: a marker with a
   higher epoch read by the tail (another coordinator took the partition), or an append /
   read-back that did not succeed within ``append_timeout_s`` (state may then diverge from
   the log: the only safe move is to give the partition up; ownership retakes it with a new
   epoch and reloads).

The table (:class:`ReplayTable`) is the only state that records change, and only through
``apply(record, now_ms) -> bool`` (False: a fenced late write, ignored): ``decode(key, value,
epoch)`` types a record read from the log, ``marker_epoch`` / ``marker_owner`` are the highest
epoch marker seen and ``current_record(key, epoch)`` is the record that restates the key's
valid value (the repair of a fenced late write, records.py). Handlers return durable changes
as records; what they change in the table directly is its volatile part only (group.py).

Repair invariant: a key is restated only when its LAST record read is a fenced late write
(a later applied record of the key cancels the repair) and only once the replayed position
has passed every record this runtime appended (``_own_end``): until then the table does not
yet hold this runtime's own latest value, and restating it would append a stale value AFTER
the fresh one (seen: a Complete* record in flight, a late write of the deposed owner read
first, the repair restated Prepare* behind Complete* and the transaction never completed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from headwater import timeouts
from headwater.client import AsyncConsumer, AsyncProducer, TopicPartition
from services.coordinator import records as rec
from services.coordinator.handlers import PartitionLostError
from services.coordinator.outcome import Outcome, WaitKey

__all__ = ["LogRuntime", "PartitionLostError", "ReplayTable", "Request"]

log = logging.getLogger(__name__)

TICK_S = 0.15


class ReplayTable(Protocol):
    marker_epoch: int
    marker_owner: int

    def decode(self, key: bytes | None, value: bytes | None, epoch: int) -> rec.Record: ...

    def apply(self, record: rec.Record, now_ms: int) -> bool: ...

    def current_record(self, key: bytes, epoch: int) -> rec.Record: ...


TableT = TypeVar("TableT", bound=ReplayTable)


@dataclass
class Request:
    request: object  # typed: its type selects its handler
    future: asyncio.Future[Any]


class LogRuntime(Generic[TableT]):
    """See the module docstring. Subclasses give the table and the handlers."""

    def __init__(
        self,
        *,
        partition: int,
        epoch: int,
        coordinator_id: int,
        producer: AsyncProducer,
        bootstrap: str,
        topic: str,
        table: TableT,
        append_timeout_s: float = 15.0,
    ) -> None:
        self.partition = partition
        self.epoch = epoch
        self.coordinator_id = coordinator_id
        self.topic = topic
        self.loaded = asyncio.Event()
        self.stopped = False
        self._producer = producer
        self._bootstrap = bootstrap
        self._append_timeout_s = append_timeout_s
        self._queue: asyncio.Queue[Request] = asyncio.Queue()
        self._parked: dict[WaitKey, Request] = {}
        self._table: TableT = table
        self._applied = 0  # the next offset the tail will deliver (replayed position)
        self._fenced_keys: set[bytes] = set()  # keys whose latest read record replay ignored
        self._own_end = 0  # the offset after the last record this runtime appended
        self._consumer: AsyncConsumer | None = None

    # ------------------------------------------------------------ hooks

    def _not_coordinator(self, request: object) -> Any:
        """The in-band NOT_COORDINATOR answer to ``request`` (raise PartitionLostError for
        internal requests)."""
        raise PartitionLostError("not the coordinator")

    async def _handle(self, req: Request) -> None:
        raise NotImplementedError

    async def _periodic(self) -> None:
        """Timers, every TICK_S while serving."""

    def _on_loaded(self) -> None:
        """Called once the load replay is done (before serving)."""

    def _on_stop(self) -> None:
        """Called once when the runtime stops (before queued requests are answered)."""

    def _summary(self) -> str:
        return ""

    # ------------------------------------------------------------ other tasks' side

    async def submit(self, request: object) -> Any:
        """Queue a typed request for the owning task and wait for its answer."""
        if self.stopped:
            return self._not_coordinator(request)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(Request(request, fut))
        return await fut

    def post(self, request: object) -> None:
        """Queue an internal request whose answer nobody waits for."""
        if not self.stopped:
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._queue.put_nowait(Request(request, fut))

    # ------------------------------------------------------------ the owning task

    async def run(self) -> None:
        """Load, then serve until cancelled or fenced; always answers what is left."""
        tp = TopicPartition(self.topic, self.partition)
        self._consumer = AsyncConsumer(
            self._bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            enable_auto_commit=False,
        )
        try:
            self._consumer.assign([tp])
            await self._consumer.seek_to_beginning(tp)
            await self._commit(Outcome(records=[rec.marker(self.epoch, self.coordinator_id)]))
            if self._table.marker_epoch != self.epoch:
                raise PartitionLostError(f"fenced at load by epoch {self._table.marker_epoch}")
            self.loaded.set()
            log.info(
                "%s partition %d loaded at epoch %d (%s, position %d)",
                self.topic, self.partition, self.epoch, self._summary(), self._applied,
            )  # fmt: skip
            self._on_loaded()
            await self._serve()
        except PartitionLostError as exc:
            log.warning(
                "%s partition %d epoch %d given up: %s", self.topic, self.partition, self.epoch, exc
            )
        except Exception:  # e.g. the tail consumer found no broker: ownership retakes it
            log.exception("%s partition %d epoch %d failed", self.topic, self.partition, self.epoch)
        finally:
            self._shutdown()
            with contextlib.suppress(Exception):
                await self._consumer.close()

    def _shutdown(self) -> None:
        self.stopped = True
        self._on_stop()
        for r in self._parked.values():
            self._answer_lost(r)
        self._parked.clear()
        while not self._queue.empty():
            self._answer_lost(self._queue.get_nowait())

    def _answer_lost(self, r: Request) -> None:
        if r.future.done():
            return
        try:
            r.future.set_result(self._not_coordinator(r.request))
        except PartitionLostError as exc:
            r.future.set_exception(exc)

    async def _serve(self) -> None:
        next_tick = time.monotonic() + TICK_S
        while True:
            await self._read(timeout_ms=0)
            timeout = max(0.0, next_tick - time.monotonic())
            try:
                req: Request | None = await timeouts.wait_for(self._queue.get(), timeout)
            except TimeoutError:
                req = None
            if req is not None:
                if not req.future.done():
                    try:
                        await self._handle(req)
                    except BaseException:
                        # its append failed (partition lost): answer it like the queued and
                        # parked ones, or its caller waits out its whole deadline (seen: an
                        # AddPartitionsToTxn held 30 s after a leader kill, the copier stalled)
                        self._answer_lost(req)
                        raise
                continue
            next_tick = time.monotonic() + TICK_S
            await self._periodic()

    async def _commit(self, out: Outcome, req: Request | None = None) -> None:
        """Append ``out.records``, wait until replayed, then answer / park / reply."""
        if out.records:
            last = await self._append(out.records)
            deadline = time.monotonic() + self._append_timeout_s
            while self._applied <= last:
                if time.monotonic() >= deadline:
                    raise PartitionLostError(f"offset {last} not read back in time")
                await self._read(timeout_ms=200)
        if req is not None:
            if out.wait is not None:
                self._parked[out.wait] = req
            elif not req.future.done():
                req.future.set_result(out.response)
        for key, resp in out.replies:
            parked = self._parked.pop(key, None)
            if parked is not None and not parked.future.done():
                parked.future.set_result(resp)

    async def _append(self, records: list[rec.Record]) -> int:
        futures = []
        try:
            for r in records:
                futures.append(
                    await self._producer.send(
                        self.topic,
                        r.value,
                        r.key,
                        partition=self.partition,
                        headers=r.headers,
                    )
                )
            done = await timeouts.wait_for(asyncio.gather(*futures), self._append_timeout_s)
        except Exception as exc:
            for f in futures:
                f.cancel()
            raise PartitionLostError(f"append failed: {exc!r}") from exc
        last = max(md.offset for md in done)
        self._own_end = max(self._own_end, last + 1)
        return last

    async def _read(self, timeout_ms: int) -> None:
        assert self._consumer is not None
        for r in await self._consumer.poll(timeout_ms=timeout_ms, max_records=10_000):
            try:
                record = self._table.decode(r.key, r.value, rec.epoch_of(r.headers))
                applied = self._table.apply(record, int(time.time() * 1000))
                if r.key is not None:
                    if applied:
                        self._fenced_keys.discard(r.key)  # a valid later record: no repair
                    else:
                        self._fenced_keys.add(r.key)
            except (rec.BadRecordError, ValueError, KeyError) as exc:
                log.error("%s[%d]: bad record at %d: %r", self.topic, self.partition, r.offset, exc)
            self._applied = max(self._applied, r.offset + 1)
        if self._table.marker_epoch > self.epoch:
            raise PartitionLostError(
                f"coordinator {self._table.marker_owner} took over at epoch "
                f"{self._table.marker_epoch}"
            )
        if (
            self._fenced_keys
            and self._table.marker_epoch == self.epoch
            and self._applied >= self._own_end
        ):
            await self._repair()

    async def _repair(self) -> None:
        """Restate every key whose latest record is a fenced late write (records.py): under
        compaction that record would otherwise survive and shadow the valid value. Called
        only when every own append has been replayed (module docstring: repair invariant)."""
        keys, self._fenced_keys = sorted(self._fenced_keys), set()
        log.warning(
            "%s[%d]: %d fenced late write(s) read; restating their keys at epoch %d",
            self.topic,
            self.partition,
            len(keys),
            self.epoch,
        )
        await self._append([self._table.current_record(k, self.epoch) for k in keys])
