"""Follower fetching: one session per leader broker carrying every partition followed from it.

``FetcherManager`` (owned by the replica manager, event loop only) maps each partition this
broker follows to the ``LeaderFetcher`` of its leader broker, creating one fetcher task
(``broker-fetcher-<leader id>``, which logs and survives any failure of a round) per leader
broker on demand. Each fetcher holds ONE
``ReplicaFetch`` bidi stream and runs Kafka's replica-fetcher loop in lockstep:

1. partitions added since the last round (a LeaderAndIsr made this broker their follower, or
   changed their leader epoch) first truncate: OffsetForLeaderEpoch with the follower's
   latest epoch, cut to the answer (``truncation.py``: never to the follower's own HW);
2. send one request with ``fetch_offset = LEO`` of the ready partitions (the leader learns
   follower progress from it), await the one response. The stream is an incremental fetch
   session (Kafka's KIP-227; ``ReplicaFetchRequest.incremental``): the leader keeps the
   partitions named on the stream and fetches each again at its last named offset and
   epoch, so a request names only the partitions added or changed since the previous one
   (``changed``: an answer applied, a pause, a truncation, a LeaderAndIsr) and forgets those
   no longer ready (paused, truncating, removed); the response carries only the partitions
   with news. A partition answered with an error leaves the session at once and is named
   afresh once ready (the leader answers an error once, and the partition may become
   ready again before a request could forget it). An idle round costs nothing per
   partition on either side. A leader that answers without ``incremental`` (an older
   version) gets every ready partition named in every request of that stream;
3. per partition: append the batches exactly as the leader stored them
   (``Partition.append_as_follower``: CRCs checked, base offset must equal our LEO), move the
   HW to ``min(leader HW, LEO)``; errors: ``FENCED_LEADER_EPOCH`` (our epoch is old) and
   ``NOT_LEADER_OR_FOLLOWER``/``UNKNOWN_LEADER_EPOCH``/``UNKNOWN_TOPIC_OR_PARTITION``
   (metadata not there yet) pause the partition until a LeaderAndIsr re-adds it or a short
   delay passes; ``OFFSET_OUT_OF_RANGE`` below the leader's log start empties our log and
   restarts it at the leader's log start, otherwise re-runs truncation;
4. repeat. A broken stream (leader gone, restarted, unreachable) is reopened with backoff
   (0.1 s doubling to 1 s); the address is looked up again each time (``Peers``).

A partition's fetch state is replaced, not mutated, when it is re-added, so a response that
was in flight for an older state is ignored; the partition's own writer lock and epoch check
reject writes after it stopped following in that epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from headwater import timeouts
from headwater.v1 import broker_pb2, broker_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.partition import Partition
from services.broker.replication import fetch_wire
from services.broker.replication.peers import Peers
from services.broker.replication.truncation import truncation_target

log = logging.getLogger(__name__)

Key = tuple[str, int]
MAX_WAIT_MS = 500
MAX_BYTES = 8 * 1024 * 1024
RPC_TIMEOUT_S = 10.0
PAUSE_S = 0.3
MIN_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0


@dataclass(eq=False)
class FetchState:
    partition: Partition
    leader_epoch: int
    truncating: bool = True
    paused_until: float = 0.0

    def ready(self, now: float) -> bool:
        return not self.truncating and self.paused_until <= now


#: What the leader's session holds for a partition: the state, offset and epoch last named.
Named = tuple[FetchState, int, int]


class SessionError(Exception):
    """The leader refused or ended the session: reconnect after a backoff."""


async def write_request(
    call: grpc.aio.StreamStreamCall, req: broker_pb2.ReplicaFetchRequest
) -> None:
    """Send one request on the session's stream (bounded by RPC_TIMEOUT_S). A stream the
    leader's side has already ended (the leader died or closed it) is a :class:`SessionError`,
    retried with the usual backoff: grpc.aio reports a write to a finished call as
    ``asyncio.InvalidStateError`` rather than as the call's status."""
    try:
        await timeouts.wait_for(call.write(req), RPC_TIMEOUT_S)
    except asyncio.InvalidStateError:
        raise SessionError("the leader's side of the stream has ended") from None


class LeaderFetcher:
    """The fetch session with one leader broker (see module doc)."""

    def __init__(self, manager: FetcherManager, leader_id: int) -> None:
        self.m = manager
        self.leader_id = leader_id
        self.states: dict[Key, FetchState] = {}
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        #: partitions whose fetch may differ from what the session holds (to name or forget)
        self.changed: set[Key] = set()
        #: partitions that must truncate first (``FetchState.truncating``), and paused ones
        self.truncating: set[Key] = set()
        self.paused: set[Key] = set()
        #: the leader's session (this stream's): what it fetches for each partition
        self.session: dict[Key, Named] = {}
        #: answered with an error: no longer in ``session`` here, named again once ready, and
        #: forgotten by the next request unless that names it
        self.unnamed: set[Key] = set()
        #: the stream's leader keeps incremental sessions (until it answers without)
        self.incremental = True

    def put(self, s: FetchState) -> None:
        """Fetch ``s`` (replacing the partition's state), truncating first."""
        key = s.partition.key
        self.states[key] = s
        self.changed.add(key)
        self._truncate_first(s)
        self.wake.set()

    def drop(self, key: Key) -> None:
        if self.states.pop(key, None) is not None:
            self.changed.add(key)

    def _truncate_first(self, s: FetchState) -> None:
        s.truncating = True
        self.truncating.add(s.partition.key)
        self.changed.add(s.partition.key)

    def _pause(self, s: FetchState, until: float) -> None:
        s.paused_until = until
        self.changed.add(s.partition.key)

    def _new_stream(self) -> None:
        self.session.clear()
        self.unnamed.clear()
        self.changed.update(self.states)
        self.incremental = True

    def _request(self, now: float) -> broker_pb2.ReplicaFetchRequest | None:
        """The next request of the stream; None when there is nothing to fetch."""
        for key in list(self.paused):
            s = self.states.get(key)
            if s is None or s.paused_until <= now:
                self.paused.discard(key)
                self.changed.add(key)
        keys, self.changed = self.changed, set()
        named: list[FetchState] = []
        forgotten: list[Key] = []
        for key in keys:
            s = self.states.get(key)
            if s is not None and s.ready(now):
                fetch = (s, s.partition.log_end_offset, s.leader_epoch)
                if self.session.get(key) != fetch:
                    self.session[key] = fetch
                    named.append(s)
            else:
                if s is not None and s.paused_until > now:
                    self.paused.add(key)
                if self.session.pop(key, None) is not None:
                    forgotten.append(key)
        if self.unnamed:
            forgotten.extend(k for k in self.unnamed if k not in self.session)
            self.unnamed.clear()
        if not self.incremental:  # a leader without sessions: every ready partition, always
            named = [self.session[k][0] for k in self.session]
        elif not (self.session or forgotten):
            return None
        epoch = self.m.broker_epoch()
        return broker_pb2.ReplicaFetchRequest(
            replica_id=self.m.broker_id,
            broker_epoch=epoch if epoch is not None else -1,
            max_wait_ms=MAX_WAIT_MS,
            min_bytes=1,
            max_bytes=MAX_BYTES,
            incremental=self.incremental,
            partitions=[
                broker_pb2.ReplicaFetchPartition(
                    topic=s.partition.topic,
                    partition=s.partition.partition,
                    fetch_offset=s.partition.log_end_offset,
                    current_leader_epoch=s.leader_epoch,
                    log_start_offset=s.partition.log_start_offset,
                )
                for s in named
            ],
            forgotten=[broker_pb2.ReplicaFetchForgotten(topic=t, partition=n) for t, n in forgotten]
            if self.incremental
            else [],
        )

    async def _idle(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await timeouts.wait_for(self.wake.wait(), timeout)
        self.wake.clear()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = MIN_BACKOFF_S
        while True:
            if not self.states:
                await self._idle(5.0)
                continue
            address = self.m.peers.broker_address(self.leader_id)
            if address is None:
                await self._idle(PAUSE_S)
                continue
            channel = self.m.peers.channel(address)
            stub = broker_pb2_grpc.BrokerStub(channel)
            call = fetch_wire.open_stream(channel)
            self._new_stream()
            try:
                while self.states:
                    await self._truncate_pending(stub)
                    now = loop.time()
                    req = self._request(now)
                    if req is None:
                        pauses = [
                            s.paused_until - now
                            for k in self.paused
                            if (s := self.states.get(k)) is not None
                        ]
                        await self._idle(min([PAUSE_S, *[p for p in pauses if p > 0]]))
                        continue
                    await self._round(call, req)
                    backoff = MIN_BACKOFF_S
            except (grpc.RpcError, SessionError, TimeoutError) as exc:
                log.info("fetch session with broker %d at %s: %s", self.leader_id, address, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            except Exception:  # a bug must not stop replication from this leader for good
                log.exception("fetch session with broker %d failed", self.leader_id)
                await asyncio.sleep(MAX_BACKOFF_S)
            finally:
                call.cancel()

    async def _round(
        self, call: grpc.aio.StreamStreamCall, req: broker_pb2.ReplicaFetchRequest
    ) -> None:
        await write_request(call, req)
        resp = await timeouts.wait_for(call.read(), RPC_TIMEOUT_S + MAX_WAIT_MS / 1000)
        if resp is grpc.aio.EOF:
            raise SessionError("leader closed the stream")
        if resp.error_code != ErrorCode.NONE:
            raise SessionError(f"session refused: {ErrorCode.Name(resp.error_code)}")
        if self.incremental and not resp.incremental:
            log.info("broker %d keeps no incremental fetch sessions", self.leader_id)
            self.incremental = False
        todo = []
        for d in resp.partitions:
            key = (d.topic, d.partition)
            named = self.session.get(key)
            s = self.states.get(key)
            if named is None or s is None or named[0] is not s:
                continue
            self.changed.add(key)  # its offset or pause may change: the next round compares
            if d.error_code != ErrorCode.NONE:
                # The leader answers an error once; whatever it was (not led there yet, an
                # epoch, an offset), the partition is named afresh when ready again.
                del self.session[key]
                self.unnamed.add(key)
            if not self._apply_now(s, d):
                todo.append(self._apply(s, d))
        # The appends that could not be done at once (a worker thread's: the first batch of
        # a new leader epoch writes the leader-epoch checkpoint), one entry per partition,
        # each under its own lock: concurrently, so they overlap instead of adding up.
        if todo:
            await asyncio.gather(*todo)

    def _apply_now(self, s: FetchState, d: fetch_wire.PartitionDataView) -> bool:
        """Apply a partition's answer without awaiting (the steady state: a small append on
        the event loop, no task per partition per round); False when :meth:`_apply` must."""
        if d.error_code != ErrorCode.NONE:
            return False
        p = s.partition
        try:
            ok = p.append_as_follower_now(d.records, s.leader_epoch, d.high_watermark)
        except Exception as exc:  # a batch that does not continue our log, or corrupt
            self._append_failed(s, exc)
            return True
        if ok is None:
            return False
        if not ok:
            self.drop(p.key)
        return True

    def _append_failed(self, s: FetchState, exc: Exception) -> None:
        log.warning("%r: cannot append replicated batches: %s", s.partition, exc)
        self._truncate_first(s)
        self._pause(s, asyncio.get_running_loop().time() + PAUSE_S)

    async def _apply(self, s: FetchState, d: fetch_wire.PartitionDataView) -> None:
        p = s.partition
        now = asyncio.get_running_loop().time()
        code = d.error_code
        if code == ErrorCode.NONE:
            try:
                ok = await p.append_as_follower(d.records, s.leader_epoch, d.high_watermark)
            except Exception as exc:  # a batch that does not continue our log, or corrupt
                self._append_failed(s, exc)
                return
            if not ok:
                self.drop(p.key)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if d.log_start_offset > p.log_end_offset:
                log.info("%r: leader log starts at %d, restarting there", p, d.log_start_offset)
                await p.truncate(d.log_start_offset, s.leader_epoch, fully=True)
            else:
                self._truncate_first(s)
        else:
            log.info("%r: fetch from broker %d: %s", p, self.leader_id, ErrorCode.Name(code))
            self._pause(s, now + (1.0 if code == ErrorCode.FENCED_LEADER_EPOCH else PAUSE_S))

    async def _truncate_pending(self, stub: broker_pb2_grpc.BrokerStub) -> None:
        """Run OffsetForLeaderEpoch rounds for partitions that must truncate first."""
        for _ in range(8):  # a few KIP-279 rounds per pass; more continue next pass
            now = asyncio.get_running_loop().time()
            todo = []
            for key in list(self.truncating):
                s = self.states.get(key)
                if s is None or not s.truncating:
                    self.truncating.discard(key)
                elif s.paused_until <= now:
                    todo.append(s)
            if not todo:
                return
            asks: list[tuple[FetchState, int]] = []
            for s in todo:
                latest = int(s.partition.log.latest_epoch)
                if latest < 0:
                    self._truncated(s, True)  # no history: nothing can diverge
                else:
                    asks.append((s, latest))
            if not asks:
                return
            req = broker_pb2.OffsetForLeaderEpochRequest(
                replica_id=self.m.broker_id,
                partitions=[
                    broker_pb2.OffsetForLeaderEpochPartition(
                        topic=s.partition.topic,
                        partition=s.partition.partition,
                        current_leader_epoch=s.leader_epoch,
                        leader_epoch=latest,
                    )
                    for s, latest in asks
                ],
            )
            resp = await stub.OffsetForLeaderEpoch(req, timeout=RPC_TIMEOUT_S)
            answers = {(r.topic, r.partition): r for r in resp.partitions}
            # Distinct partitions, each truncated under its own lock: concurrently, so a
            # failover's hundreds of truncations (each fsyncs its log and leader-epoch
            # checkpoint) overlap instead of holding back the first fetch one by one.
            await asyncio.gather(
                *(self._truncate_one(s, answers.get(s.partition.key), now) for s, _ in asks)
            )

    async def _truncate_one(
        self, s: FetchState, r: broker_pb2.EpochEndOffset | None, now: float
    ) -> None:
        p = s.partition
        if self.states.get(p.key) is not s:
            return
        if r is None or r.error_code != ErrorCode.NONE:
            self._pause(s, now + PAUSE_S)
            return
        target = truncation_target(
            r.leader_epoch, r.end_offset, p.log.end_offset_for_epoch, p.log_end_offset
        )
        if target is None:
            self._pause(s, now + PAUSE_S)
            return
        if target.offset < p.log_end_offset and not await p.truncate(target.offset, s.leader_epoch):
            self.drop(p.key)
            return
        self._truncated(s, target.completed)

    def _truncated(self, s: FetchState, completed: bool) -> None:
        if completed and s.truncating:
            s.truncating = False
            self.truncating.discard(s.partition.key)
            self.changed.add(s.partition.key)


class FetcherManager:
    """Which leader each followed partition is fetched from; one task per leader broker."""

    def __init__(
        self,
        broker_id: int,
        peers: Peers,
        broker_epoch: Callable[[], int | None],
    ) -> None:
        self.broker_id = broker_id
        self.peers = peers
        self.broker_epoch = broker_epoch
        self._fetchers: dict[int, LeaderFetcher] = {}
        self._leader_of: dict[Key, int] = {}

    def add(self, p: Partition, leader_id: int, leader_epoch: int) -> None:
        """Follow ``p`` from ``leader_id`` in ``leader_epoch``, truncating first."""
        self.remove(p.key)
        f = self._fetchers.get(leader_id)
        if f is None:
            f = LeaderFetcher(self, leader_id)
            self._fetchers[leader_id] = f
            f.task = asyncio.create_task(f.run(), name=f"broker-fetcher-{leader_id}")
        f.put(FetchState(p, leader_epoch))
        self._leader_of[p.key] = leader_id

    def remove(self, key: Key) -> None:
        leader = self._leader_of.pop(key, None)
        if leader is not None and leader in self._fetchers:
            self._fetchers[leader].drop(key)

    def following(self, key: Key) -> int | None:
        return self._leader_of.get(key)

    async def close(self) -> None:
        tasks = [f.task for f in self._fetchers.values() if f.task is not None]
        self._fetchers.clear()
        self._leader_of.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
