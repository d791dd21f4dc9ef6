"""ReplicaFetch (leader side): one follower's fetch session, answered in lockstep.

For each request on the stream, one response:

1. session checks: the follower's ``broker_epoch`` must not be older than the one the
   metadata cache knows for ``replica_id`` (``STALE_BROKER_EPOCH`` in the response's
   ``error_code``: a previous incarnation of that broker), and ``replica_id`` is not us;
2. per partition: led here (``NOT_LEADER_OR_FOLLOWER`` / ``UNKNOWN_TOPIC_OR_PARTITION``), the
   follower is one of its replicas (``NOT_LEADER_OR_FOLLOWER``), ``current_leader_epoch``
   matches (older: ``FENCED_LEADER_EPOCH``, newer: ``UNKNOWN_LEADER_EPOCH``), ``fetch_offset``
   within ``[log start, LEO]`` (``OFFSET_OUT_OF_RANGE``, with the leader's log start so the
   follower can restart there);
3. ``fetch_offset`` is the follower's log end offset: recorded once per request
   (``Partition.record_follower_fetch``), which may advance the high watermark and may
   propose the follower joining the ISR;
4. long poll: when no partition has anything past the follower's offset, wait up to
   ``max_wait_ms`` for an append or state change on any of them;
5. a partition the follower has all of is answered at once (no read); for the others, read
   whole batches from ``fetch_offset`` up to the leader's LEO (not the HW: a follower
   needs everything), at most ``max_bytes`` per partition (clamped to 16 MiB; at least the
   first batch), and answer with the HW. ``max_wait_ms`` is clamped to 30 s.

Answers are :class:`~services.broker.replication.fetch_wire.ReplicaFetchView` objects around
the bytes the log read returned, serialised by hand (``fetch_wire``): the records are copied
once per follower, into the message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from headwater.errors import (
    FencedLeaderEpochError,
    HeadwaterError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    message_of,
)
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker import metrics
from services.broker.codes import error_code
from services.broker.partition import Partition, SessionClock
from services.broker.replica_manager import ReplicaManager
from services.broker.replication.fetch_wire import PartitionDataView, ReplicaFetchView
from services.broker.replication.isr import now_ms

log = logging.getLogger(__name__)

DEFAULT_MAX_WAIT_MS = 500
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
MAX_WAIT_CAP_MS = 30_000
#: A larger per-partition ``max_bytes`` is clamped to this (followers ask for 8 MiB; the first
#: batch is always sent whole, whatever its size).
MAX_BYTES_CAP = 16 * 1024 * 1024


def leader_for(rm: ReplicaManager, topic: str, partition: int, current_epoch: int) -> Partition:
    """The led partition, fenced by the requester's view of the leader epoch (-1: unchecked)."""
    p = rm.leader_partition(topic, partition)
    if current_epoch >= 0 and current_epoch != p.leader_epoch:
        cls = FencedLeaderEpochError if current_epoch < p.leader_epoch else UnknownLeaderEpochError
        raise cls(f"{topic}-{partition}: request epoch {current_epoch}, leader {p.leader_epoch}")
    return p


def _session_error(rm: ReplicaManager, req: broker_pb2.ReplicaFetchRequest) -> int:
    if req.replica_id == rm.broker_id or req.replica_id < 0:
        return ErrorCode.INVALID_REQUEST
    known = rm.metadata.broker(req.replica_id)
    if known is not None and known.broker_epoch > 0 and req.broker_epoch < known.broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    return ErrorCode.NONE


def _record_fetch(
    rm: ReplicaManager,
    p: Partition,
    replica_id: int,
    fetch_offset: int,
    now: float,
    clock: SessionClock | None = None,
) -> None:
    """Record follower ``replica_id``'s fetch of ``p`` at ``fetch_offset`` (its progress, the
    HW; the ISR grows when it caught up); ``clock``: its incremental session's, if any.
    Raises NotLeaderOrFollowerError (not a replica) or OffsetOutOfRangeError, recording
    nothing."""
    if replica_id not in p.replicas:
        raise NotLeaderOrFollowerError(
            f"broker {replica_id} is not a replica of {p.topic}-{p.partition}"
        )
    if not p.log_start_offset <= fetch_offset <= p.log_end_offset:
        raise OffsetOutOfRangeError(
            f"offset {fetch_offset} is outside [{p.log_start_offset}, {p.log_end_offset}] of "
            f"{p.topic}-{p.partition}"
        )
    if p.record_follower_fetch(replica_id, fetch_offset, now, clock):
        rm.isr.expand(p, replica_id)


async def answer(rm: ReplicaManager, req: broker_pb2.ReplicaFetchRequest) -> ReplicaFetchView:
    """The response to one request of the session (see module doc)."""
    code = _session_error(rm, req)
    if code != ErrorCode.NONE:
        return ReplicaFetchView(error_code=code)
    loop = asyncio.get_running_loop()
    max_wait = min(req.max_wait_ms if req.max_wait_ms > 0 else DEFAULT_MAX_WAIT_MS, MAX_WAIT_CAP_MS)
    max_bytes = min(req.max_bytes, MAX_BYTES_CAP) if req.max_bytes > 0 else DEFAULT_MAX_BYTES
    deadline = loop.time() + max_wait / 1000.0
    errors: dict[int, BaseException] = {}
    led: dict[int, Partition] = {}
    now = now_ms()
    for i, fp in enumerate(req.partitions):
        try:
            p = leader_for(rm, fp.topic, fp.partition, fp.current_leader_epoch)
            led[i] = p
            _record_fetch(rm, p, req.replica_id, fp.fetch_offset, now)
        except HeadwaterError as exc:
            errors[i] = exc
    # long poll until some partition has records for the follower (or the deadline)
    with metrics.REPLICA_FETCH_WAITING.labels(str(req.replica_id)).track_inprogress():
        await _long_poll(req, led, deadline, bool(errors))
    results = await _all_data(
        [(fp, led.get(i), errors.get(i)) for i, fp in enumerate(req.partitions)], max_bytes
    )
    return ReplicaFetchView(results)


async def _all_data(
    items: list[tuple[_Fetched, Partition | None, BaseException | None]], max_bytes: int
) -> list[PartitionDataView]:
    """Each partition's answer, in order. Tail reads are answered at once (no task per
    partition per answer); the rest (a follower far behind: a worker thread's read each)
    concurrently."""
    results: list[PartitionDataView | None] = [
        _partition_data_now(fp, p, err, max_bytes) for fp, p, err in items
    ]
    later = [i for i, r in enumerate(results) if r is None]
    if later:
        done = await asyncio.gather(*(_partition_data(*items[i], max_bytes) for i in later))
        for i, r in zip(later, done, strict=True):
            results[i] = r
    return [r for r in results if r is not None]


async def _long_poll(
    req: broker_pb2.ReplicaFetchRequest,
    led: dict[int, Partition],
    deadline: float,
    has_errors: bool,
) -> None:
    """Wait until a partition has records past the follower's offset, one lost its
    leadership, or the deadline passed (not at all when some partition has an error)."""
    loop = asyncio.get_running_loop()
    while not has_errors and led:
        if any(req.partitions[i].fetch_offset < p.log_end_offset for i, p in led.items()):
            return
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        # one future for every partition, registered in the same step as the check above
        # (no append can slip in between); not a task per partition per wait
        woken: asyncio.Future[None] = loop.create_future()
        for p in led.values():
            p.watch_appended(woken)
        try:
            await asyncio.wait({woken}, timeout=remaining)
        finally:
            woken.cancel()
            for p in led.values():
                p.unwatch_appended(woken)
        if any(not p.is_leader for p in led.values()):
            return


class _Fetched(Protocol):
    """What a fetch asks of one partition (a request's entry, or a session's)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def fetch_offset(self) -> int: ...


def _partition_data_now(
    fp: _Fetched, p: Partition | None, err: BaseException | None, max_bytes: int
) -> PartitionDataView | None:
    """:func:`_partition_data` for a leader's tail read, without awaiting; None otherwise."""
    if p is None or err is not None or not p.is_leader:
        return None
    if fp.fetch_offset == p.log_end_offset:  # caught up (an idle session's every partition)
        return PartitionDataView(
            fp.topic,
            fp.partition,
            high_watermark=p.high_watermark,
            log_start_offset=p.log_start_offset,
        )
    try:
        part = p.read_now(fp.fetch_offset, max_bytes, None)
    except Exception:
        return None  # answered with its error (and logged if unexpected) by _partition_data
    if part is None:
        return None
    return PartitionDataView(
        fp.topic,
        fp.partition,
        records=part.data,
        high_watermark=p.high_watermark,
        log_start_offset=p.log_start_offset,
    )


async def _partition_data(
    fp: _Fetched, p: Partition | None, err: BaseException | None, max_bytes: int
) -> PartitionDataView:
    out = PartitionDataView(fp.topic, fp.partition, high_watermark=-1, log_start_offset=-1)
    if p is not None and err is None:
        try:
            if not p.is_leader:
                raise NotLeaderOrFollowerError(f"{p.topic}-{p.partition} lost its leadership")
            part = await p.read(fp.fetch_offset, max_bytes, None)
            out.records = part.data
            out.high_watermark = p.high_watermark
            out.log_start_offset = p.log_start_offset
            return out
        except Exception as exc:
            err = exc
            if not isinstance(exc, HeadwaterError):
                log.exception("replica fetch of %s-%d failed", fp.topic, fp.partition)
    assert err is not None
    out.error_code = error_code(err)
    out.error_message = message_of(err)
    if p is not None:
        with contextlib.suppress(Exception):
            out.log_start_offset = p.log_start_offset
    return out


Key = tuple[str, int]


@dataclass(eq=False)
class _Entry:
    """One partition of an incremental session: what the follower last named."""

    topic: str
    partition: int
    fetch_offset: int
    leader_epoch: int
    #: the partition this session listens to (the one the last check found)
    watched: Partition | None = None
    hw_sent: int = -1
    log_start_sent: int = -1


class FetchSession:
    """One follower's incremental fetch session (the stream's; see the proto's
    ``ReplicaFetchRequest.incremental``), on the event loop.

    Keeps the partitions the follower named, each with the offset and leader epoch it last
    named, and listens to each (:meth:`Partition.add_listener`): an append, HW advance or
    state change marks it dirty and wakes the long poll. A request is answered after checking
    (as :func:`answer` does) only the partitions it names, the dirty ones and those answered
    with records last time (re-sent if the follower did not move on); the response carries
    only those with records, an error, or a HW or log start other than last sent. An idle
    round therefore costs nothing per partition; the ISR's view of an idle follower comes
    from the session's ``SessionClock`` (``Partition.out_of_sync``). A partition answered
    with an error leaves the session (nor listener nor entry kept): the session holds at
    most the partitions led here that list the requester among their replicas.
    """

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self.replica_id = -1
        self.entries: dict[Key, _Entry] = {}
        self.clock = SessionClock()
        self._dirty: set[Key] = set()
        self._resend: set[Key] = set()
        self._waiter: asyncio.Future[None] | None = None

    def _changed(self, p: Partition) -> None:
        self._dirty.add(p.key)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _forget(self, key: Key) -> None:
        e = self.entries.pop(key, None)
        if e is not None and e.watched is not None:
            e.watched.remove_listener(self._changed)
            e.watched.end_follower_session(self.replica_id, self.clock)

    def close(self) -> None:
        """The stream ended: stop listening, the partitions' followers leave the session."""
        for key in list(self.entries):
            self._forget(key)
        self._dirty.clear()
        self._resend.clear()

    def _check(
        self, keys: set[Key], errors: dict[Key, BaseException], led: dict[Key, Partition]
    ) -> None:
        now = now_ms()
        for key in keys:
            e = self.entries.get(key)
            if e is None:
                continue
            errors.pop(key, None)
            led.pop(key, None)
            try:
                p = leader_for(self.rm, e.topic, e.partition, e.leader_epoch)
                if e.watched is not p:
                    if e.watched is not None:
                        e.watched.remove_listener(self._changed)
                    p.add_listener(self._changed)
                    e.watched = p
                led[key] = p
                _record_fetch(self.rm, p, self.replica_id, e.fetch_offset, now, self.clock)
            except HeadwaterError as exc:
                errors[key] = exc

    def _news(self, key: Key, errors: dict[Key, BaseException], led: dict[Key, Partition]) -> bool:
        """Whether ``key`` has anything to tell the follower."""
        if key in errors:
            return True
        p = led.get(key)
        e = self.entries.get(key)
        if p is None or e is None:
            return False
        return (
            not p.is_leader
            or e.fetch_offset < p.log_end_offset
            or p.high_watermark != e.hw_sent
            or p.log_start_offset != e.log_start_sent
        )

    async def answer(self, req: broker_pb2.ReplicaFetchRequest) -> ReplicaFetchView:
        """The response to one request of the session (see the class doc)."""
        code = _session_error(self.rm, req)
        if code == ErrorCode.NONE and self.replica_id not in (-1, req.replica_id):
            code = ErrorCode.INVALID_REQUEST  # one follower per session
        if code != ErrorCode.NONE:
            return ReplicaFetchView(error_code=code, incremental=True)
        self.replica_id = req.replica_id
        loop = asyncio.get_running_loop()
        max_wait = min(
            req.max_wait_ms if req.max_wait_ms > 0 else DEFAULT_MAX_WAIT_MS, MAX_WAIT_CAP_MS
        )
        max_bytes = min(req.max_bytes, MAX_BYTES_CAP) if req.max_bytes > 0 else DEFAULT_MAX_BYTES
        deadline = loop.time() + max_wait / 1000.0
        self.clock.last_ms = now_ms()
        for fg in req.forgotten:
            self._forget((fg.topic, fg.partition))
        todo, self._resend = self._resend, set()
        for fp in req.partitions:
            key = (fp.topic, fp.partition)
            e = self.entries.get(key)
            if e is None:
                self.entries[key] = _Entry(
                    fp.topic, fp.partition, fp.fetch_offset, fp.current_leader_epoch
                )
            else:
                e.fetch_offset = fp.fetch_offset
                e.leader_epoch = fp.current_leader_epoch
            todo.add(key)
        todo |= self._dirty
        self._dirty.clear()
        errors: dict[Key, BaseException] = {}
        led: dict[Key, Partition] = {}
        self._check(todo, errors, led)
        # long poll until some partition has news for the follower (or the deadline)
        with metrics.REPLICA_FETCH_WAITING.labels(str(req.replica_id)).track_inprogress():
            while not any(self._news(k, errors, led) for k in todo):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._waiter = loop.create_future()
                try:
                    await asyncio.wait({self._waiter}, timeout=remaining)
                finally:
                    self._waiter.cancel()
                    self._waiter = None
                woken, self._dirty = self._dirty, set()
                todo |= woken
                self._check(woken, errors, led)
        keys = [k for k in todo if k in self.entries and self._news(k, errors, led)]
        results = await _all_data(
            [(self.entries[k], led.get(k), errors.get(k)) for k in keys], max_bytes
        )
        for k, data in zip(keys, results, strict=True):
            e = self.entries.get(k)
            if data.error_code != ErrorCode.NONE:
                # answered with its error once: it leaves the session (as it leaves the
                # follower's view of it); the follower names it afresh once ready. So the
                # session holds only partitions the requester may fetch here, whatever it
                # names.
                self._forget(k)
            elif e is not None:
                e.hw_sent = data.high_watermark
                e.log_start_sent = data.log_start_offset
                if data.records:
                    self._resend.add(k)
        return ReplicaFetchView(results, incremental=True)


async def handle(
    rm: ReplicaManager, requests: AsyncIterator[broker_pb2.ReplicaFetchRequest]
) -> AsyncIterator[ReplicaFetchView]:
    """One response per request: an incremental session's (:class:`FetchSession`) when the
    request asks for one, else :func:`answer`'s."""
    session = FetchSession(rm)
    try:
        async for req in requests:
            yield await (session.answer(req) if req.incremental else answer(rm, req))
    finally:
        session.close()
