"""One owned partition of ``__consumer_offsets``: its GroupTable, tail reader and request queue.

:class:`PartitionRuntime` runs as ONE asyncio task (``coordinator-partition-<p>-e<epoch>``) that
owns everything mutable of the partition: the :class:`GroupTable`, the parked requests and the
tail consumer. Other tasks talk to it only through :meth:`PartitionRuntime.submit` (a queue).

Lifecycle:

1. **load**: assign the tail consumer to the partition from the beginning, append an epoch
   marker (acks=all) with the producer, replay every committed record (the consumer only
   receives records below the high watermark) with ``GroupTable.replay`` until the marker
   itself has been applied; requests submitted meanwhile wait in the queue;
2. **serve**: one request at a time: run its pure handler (``membership`` / ``offsets``) to get
   an :class:`Outcome`, append the outcome's records (acks=all, one producer, in order), read
   the tail until the replayed position passes the last appended offset, then answer (or park
   the request under ``Outcome.wait``) and answer parked requests named in ``Outcome.replies``.
   Every ~150 ms ``membership.tick`` drives session / rebalance timeouts the same way, and
   every ~5 s ``offsets.expire`` writes retention tombstones;
3. **stop** (released by ownership, fenced, or a failed append): every queued and parked
   request is answered NOT_COORDINATOR. Fencing: a marker with a higher epoch read by the tail
   (another coordinator took the partition), or an append / read-back that did not succeed
   within ``append_timeout_s`` (state may then diverge from the log: the only safe move is to
   give the partition up; ownership retakes it with a new epoch and reloads).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headwater.client import AsyncConsumer, AsyncProducer, TopicPartition
from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import membership, offsets
from services.coordinator import records as rec
from services.coordinator.group import GroupTable
from services.coordinator.outcome import Ctx, Outcome, WaitKey

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TICK_S = 0.15
EXPIRE_EVERY_S = 5.0


class PartitionLostError(Exception):
    """The partition is no longer served by this runtime (released or fenced)."""


@dataclass
class _Request:
    kind: str
    request: Any
    future: asyncio.Future[Any]


def not_coordinator(kind: str, request: Any, msg: str = "not the coordinator") -> Any:
    """The in-band NOT_COORDINATOR answer for a request of ``kind``."""
    code = ErrorCode.NOT_COORDINATOR
    if kind == "join":
        return pb.JoinGroupResponse(error_code=code, error_message=msg)
    if kind == "sync":
        return pb.SyncGroupResponse(error_code=code, error_message=msg)
    if kind == "heartbeat":
        return pb.HeartbeatResponse(error_code=code, error_message=msg)
    if kind == "leave":
        return pb.LeaveGroupResponse(error_code=code, error_message=msg)
    if kind == "commit":
        return pb.OffsetCommitResponse(error_code=code, error_message=msg)
    if kind == "fetch":
        return pb.OffsetFetchResponse(error_code=code, error_message=msg)
    if kind == "describe":
        group_id, _ends = request
        return pb.DescribedGroup(group_id=group_id, error_code=code)
    if kind == "delete":
        return pb.DeleteGroupsResult(group_id=request, error_code=code, error_message=msg)
    if kind == "list":
        return pb.ListGroupsResponse(error_code=code)
    raise PartitionLostError(msg)  # internal requests (tps, snapshot, rebalance)


@dataclass(frozen=True)
class GroupSnapshot:
    """What the metrics task needs of one group."""

    group_id: str
    members: int
    offsets: dict[tuple[str, int], int]
    state: str = ""  # GroupState value
    topics: frozenset[str] = frozenset()  # subscribed (consumer protocol metadata)
    generation: int = 0
    assigned: dict[str, int] | None = None  # offsets.assigned_counts of the members


class PartitionRuntime:
    """See the module docstring. Create, then run :meth:`run` as a task."""

    def __init__(
        self,
        *,
        partition: int,
        epoch: int,
        coordinator_id: int,
        producer: AsyncProducer,
        bootstrap: str,
        topic: str = OFFSETS_TOPIC,
        offsets_retention_ms: int = 7 * 24 * 3600 * 1000,
        append_timeout_s: float = 15.0,
        on_rebalance: Callable[[str, int], None] | None = None,
    ) -> None:
        self.partition = partition
        self.epoch = epoch
        self.coordinator_id = coordinator_id
        self.topic = topic
        self.loaded = asyncio.Event()
        self.stopped = False
        self._producer = producer
        self._bootstrap = bootstrap
        self._retention_ms = offsets_retention_ms
        self._append_timeout_s = append_timeout_s
        self._on_rebalance = on_rebalance
        self._queue: asyncio.Queue[_Request] = asyncio.Queue()
        self._parked: dict[WaitKey, _Request] = {}
        self._table = GroupTable()
        self._applied = 0  # the next offset the tail will deliver (replayed position)
        self._fenced_keys: set[bytes] = set()  # keys whose latest read record replay ignored
        self._ids = itertools.count(1)
        self._consumer: AsyncConsumer | None = None

    # ------------------------------------------------------------ other tasks' side

    async def submit(self, kind: str, request: Any) -> Any:
        """Queue a request for the owning task and wait for its answer."""
        if self.stopped:
            return not_coordinator(kind, request)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Request(kind, request, fut))
        return await fut

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
                "partition %d loaded at epoch %d (%d groups, position %d)",
                self.partition, self.epoch, len(self._table.groups), self._applied,
            )  # fmt: skip
            await self._serve()
        except PartitionLostError as exc:
            log.warning("partition %d epoch %d given up: %s", self.partition, self.epoch, exc)
        finally:
            self._shutdown()
            with contextlib.suppress(Exception):
                await self._consumer.close()

    def _shutdown(self) -> None:
        self.stopped = True
        for r in self._parked.values():
            if not r.future.done():
                r.future.set_result(not_coordinator(r.kind, r.request))
        self._parked.clear()
        while not self._queue.empty():
            r = self._queue.get_nowait()
            if not r.future.done():
                try:
                    r.future.set_result(not_coordinator(r.kind, r.request))
                except PartitionLostError as exc:
                    r.future.set_exception(exc)

    async def _serve(self) -> None:
        next_tick = time.monotonic() + TICK_S
        next_expire = time.monotonic() + EXPIRE_EVERY_S
        while True:
            await self._read(timeout_ms=0)
            timeout = max(0.0, next_tick - time.monotonic())
            try:
                req: _Request | None = await asyncio.wait_for(self._queue.get(), timeout)
            except TimeoutError:
                req = None
            if req is not None:
                if not req.future.done():
                    await self._handle(req)
                continue
            next_tick = time.monotonic() + TICK_S
            parked = {k for k, r in self._parked.items() if not r.future.done()}
            await self._commit(membership.tick(self._table, self._ctx(), parked))
            if time.monotonic() >= next_expire:
                next_expire = time.monotonic() + EXPIRE_EVERY_S
                await self._commit(offsets.expire(self._table, self._ctx()))

    def _ctx(self) -> Ctx:
        return Ctx(
            now_ms=int(time.time() * 1000),
            epoch=self.epoch,
            new_member_id=lambda client: f"{client or 'member'}-{uuid.uuid4().hex[:12]}",
            offsets_retention_ms=self._retention_ms,
        )

    async def _handle(self, req: _Request) -> None:
        t, r, ctx = self._table, req.request, self._ctx()
        kind = req.kind
        if kind == "join":
            out = membership.join(t, r, ctx)
        elif kind == "sync":
            out = membership.sync(t, r, ctx)
        elif kind == "heartbeat":
            out = membership.heartbeat(t, r, ctx)
        elif kind == "leave":
            out = membership.leave(t, r, ctx)
        elif kind == "commit":
            out = offsets.commit(t, r, ctx)
        elif kind == "fetch":
            out = Outcome(response=offsets.fetch(t, r))
        elif kind == "list":
            out = Outcome(response=pb.ListGroupsResponse(groups=offsets.list_groups(t, list(r))))
        elif kind == "describe":
            group_id, ends = r
            out = Outcome(response=offsets.describe(t.get(group_id), group_id, ends))
        elif kind == "delete":
            result, out = offsets.delete(t, r, ctx)
            out.response = result
        elif kind == "tps":
            out = Outcome(response=self._tps_of(r))
        elif kind == "rebalance":  # partition count of a subscribed topic changed
            out = membership.trigger_rebalance(t, r, ctx)
        elif kind == "snapshot":
            out = Outcome(response=self._snapshot())
        else:
            raise ValueError(f"unknown request kind {kind!r}")
        await self._commit(out, req)

    def _tps_of(self, group_id: str) -> list[tuple[str, int]]:
        g = self._table.get(group_id)
        if g is None:
            return []
        tps = set(g.offsets)
        for m in g.members.values():
            for tp in offsets.assignment_of(m.assignment):
                tps.update((tp.topic, p) for p in tp.partitions)
        return sorted(tps)

    def _snapshot(self) -> list[GroupSnapshot]:
        return [
            GroupSnapshot(
                gid,
                len(g.members),
                {tp: o.offset for tp, o in g.offsets.items()},
                g.state.value,
                offsets.subscribed_topics(
                    g.protocol_type, (meta for m in g.members.values() for _, meta in m.protocols)
                ),
                g.generation,
                offsets.assigned_counts(m.assignment for m in g.members.values()),
            )
            for gid, g in sorted(self._table.groups.items())
        ]

    async def _commit(self, out: Outcome, req: _Request | None = None) -> None:
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
        for group_id, duration_ms in out.rebalances:
            if self._on_rebalance is not None:
                self._on_rebalance(group_id, duration_ms)

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
            done = await asyncio.wait_for(asyncio.gather(*futures), self._append_timeout_s)
        except Exception as exc:
            for f in futures:
                f.cancel()
            raise PartitionLostError(f"append failed: {exc!r}") from exc
        return max(md.offset for md in done)

    async def _read(self, timeout_ms: int) -> None:
        assert self._consumer is not None
        for r in await self._consumer.poll(timeout_ms=timeout_ms, max_records=10_000):
            try:
                applied = self._table.replay(
                    r.key, r.value, rec.epoch_of(r.headers), int(time.time() * 1000)
                )
                if not applied and r.key is not None:
                    self._fenced_keys.add(r.key)
            except (rec.BadRecordError, ValueError, KeyError) as exc:
                log.error("partition %d: bad record at %d: %r", self.partition, r.offset, exc)
            self._applied = max(self._applied, r.offset + 1)
        if self._table.marker_epoch > self.epoch:
            raise PartitionLostError(
                f"coordinator {self._table.marker_owner} took over at epoch "
                f"{self._table.marker_epoch}"
            )
        if self._fenced_keys and self._table.marker_epoch == self.epoch:
            await self._repair()

    async def _repair(self) -> None:
        """Restate every key whose latest record is a fenced late write (records.py): under
        compaction that record would otherwise survive and shadow the valid value."""
        keys, self._fenced_keys = sorted(self._fenced_keys), set()
        log.warning(
            "partition %d: %d fenced late write(s) read; restating their keys at epoch %d",
            self.partition,
            len(keys),
            self.epoch,
        )
        await self._append([self._table.current_record(k, self.epoch) for k in keys])
