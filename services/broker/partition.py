"""One partition hosted by this broker: its Log, leadership state, followers and high watermark.

Ownership and threads:

* A ``Partition`` object lives on the broker's event loop. Leadership state (``role``,
  ``leader_epoch``, ``partition_epoch``, ``replicas``, ``isr``) is changed only by the replica
  manager's control path (LeaderAndIsr / StopReplica, serialised by the replica manager) via
  :meth:`become_leader` / :meth:`become_follower`, and — for the ISR alone — by the ISR
  manager when the controller accepted an AlterPartition (:meth:`apply_isr_change`). The ISR is
  never changed locally first: a proposal sits in ``pending_isr`` until the controller answers.
* Every log mutation runs as "the writer" under ``_append_lock``, in a worker thread: leader
  appends, follower appends and truncations (the follower fetcher), retention/flush/close
  (``run_exclusive``). Role changes take the same lock, so an in-flight follower append can
  never land after this replica became leader, nor a leader append after it became follower.
* Reads (``read``, ``offset_for_timestamp``) run in worker threads concurrently with the
  writer; the storage contract guarantees they see a consistent prefix.

High watermark (leader): ``HW = min LEO over the ISR`` (the leader's own LEO included; while an
ISR expansion is pending, over the ISR plus the joining replica, as Kafka's "maximal ISR"). It
never moves back, and — Headwater's rule from issue 3 — it does **not advance while the ISR
has fewer than min.insync.replicas members**: records written with acks=0/1 while the ISR is
too small stay invisible to consumers until enough replicas have them again. A follower's LEO
is what it last asked to fetch from. A follower's own HW is ``min(leader's HW, its LEO)``.

Follower progress for the ISR (Kafka's rule): a follower is caught up at time ``t`` when a
fetch at ``t`` asked for the leader's LEO; a fetch that reached the leader's LEO *as of the
previous fetch* makes it caught up as of that previous fetch. ``out_of_sync`` lists ISR
followers not caught up within ``replica.lag.time.max.ms``. A follower in an incremental fetch
session (``SessionClock``: its requests name only partitions that changed) asks for the same
offset again with every request of the session that does not name the partition: while that
offset is the leader's LEO it is caught up as of the session's last request, and a leader
append records that moment before it moves the LEO (:meth:`_keep_followers_caught_up`), so
an idle session costs nothing per partition.

Idempotence and transactions (docs/transactions.md): the Log validates producer ids, epochs
and sequences inside its append (the writer); a duplicate is answered with the original offsets
(acks=all still waits until they are committed). Markers (:meth:`write_marker`) are appended by
the writer too. The last stable offset ``LSO = min(HW, first unstable offset)``; the first
unstable offset is read from the Log by the writer after every log mutation and cached in
``_first_unstable`` (so readers on the loop never touch producer state a worker thread is
changing).

Notifications: ``changed()`` (HW or LSO advance, or state change; consumer fetch streams and
acks=all waiters) is an ``asyncio.Event`` replaced when fired, so a waiter captures the event,
checks its condition, then awaits, without missing a wake-up. Any leader append or state
change completes the futures registered with ``watch_appended`` (replica fetch long-polls: one
future for all the partitions of a request, registered in the same step as the check of their
log ends, instead of a task per partition waiting on an event) and calls the listeners added
with ``add_listener`` (an incremental fetch session: kept for as long as the partition is in
the session).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from headwater import timeouts
from headwater.batch import BatchHeader, iter_headers
from headwater.config import TopicConfig
from headwater.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaStorageError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
    UnknownTopicOrPartitionError,
    message_of,
)
from services.broker import metrics
from services.broker.storage.producer_state import SEQ_MOD, last_seq_of

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Appends up to this size with no fsync per append (``flush.messages`` unset), leader and
#: follower alike, and reads of at most ``_INLINE_READ_RECORDS`` records below the bound (the
#: high watermark for consumers, the log end for a follower's fetch: the tail, in the page
#: cache), run on the event loop: a page-cache write or read of that size takes tens of
#: microseconds, less than the worker-thread hop (two GIL hand-offs, a wake-up) it replaces.
#: A read is inline only when the bytes from its offset to the log end, as the in-memory
#: offset index bounds them, are at most ``_INLINE_READ_BYTES`` too, all in the active
#: segment: a few records of megabytes each (up to a fetch's max_bytes) go to a thread.
#: Measured at 10 MB/s of 1 KiB records, linger 0 (bench/peers/headwater.py e2e, issue 10):
#: append p50 1.3-2.3 ms -> 0.07 ms, append-to-fetch-answer p50 0.8-1.2 -> 0.2 ms, broker CPU
#: -20%. An append goes to a worker thread after all when another thread holds the log (flush
#: pass, cleaner, retention): Log.append_if_uncontended and
#: Log.append_as_follower_if_uncontended; the first batch of a new leader epoch does not (its
#: epoch entry is kept in memory, the file written behind). With 1,000 partitions a
#: follower's fetch round and a leader's answer to it were a thousand thread hops each, every
#: round (issue 17 item 3).
_INLINE_APPEND_BYTES = 256 * 1024
_INLINE_READ_RECORDS = 256
_INLINE_READ_BYTES = 256 * 1024
#: How long a produce whose first batch is ahead of its producer's next sequence waits for the
#: missing earlier batches before the sequence check refuses it (OUT_OF_ORDER_SEQUENCE_NUMBER).
#: An idempotent producer keeps up to 5 requests per partition in flight as concurrent gRPC
#: calls, which the broker may receive out of order (Kafka's one TCP connection keeps them in
#: order); refused, the later batch came back after the client's retry backoff with the
#: partition down to one request in flight (issue 17 item 5, docs/benchmarks.md). A batch that
#: starts where a request already queued for the append lock ends does not wait: the lock is
#: first come, first served, so it lands right after that request's batches (the sequence check
#: still decides, at its append). Waiting for the earlier request to be *appended* left the log
#: idle between appends for a loop round-trip each (docs/benchmarks.md "Session 35").
REORDER_WAIT_S = 1.0
#: At most this many produce calls of one producer wait in that reorder wait on a partition:
#: with at most 5 batches unacknowledged (Kafka's idempotent window), at most 4 can be ahead
#: of the one missing. A call beyond it is not held: the sequence check decides at once.
REORDER_MAX_WAITING_PER_PRODUCER = 4
#: At most this many produce calls wait in that reorder wait on one partition, all producers
#: together: the memory the waits hold per partition is bounded by it times the largest
#: request, whatever the clients send.
REORDER_MAX_WAITING = 64

#: Producer-state rejections, by exception class, as the rejection metric's ``reason`` label.
_REJECTION_REASONS: dict[type[Exception], str] = {
    InvalidProducerEpochError: "fenced",
    OutOfOrderSequenceNumberError: "out_of_order",
    UnknownProducerIdError: "unknown_producer_id",
    InvalidTxnStateError: "invalid_txn_state",
    TransactionCoordinatorFencedError: "coordinator_fenced",
}


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    #: closed by StopReplica or shutdown; every waiter is woken and every call fails.
    OFFLINE = "offline"


@dataclass(frozen=True)
class ProduceResult:
    """What an append assigned: offsets of the first and last record, the append time."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records: int
    size: int
    #: every batch was a duplicate of one already in the log: nothing was appended and the
    #: offsets are the original ones.
    duplicate: bool = False


#: how many times any partition's high watermark changed in this process (``hw_changes``)
_HW_CHANGES = [0]


def hw_changes() -> int:
    """A number that changes whenever any partition's high watermark does (the replica
    manager's checkpoint skips its walk over every partition while it stays the same)."""
    return _HW_CHANGES[0]


@dataclass(eq=False)
class SessionClock:
    """When a follower's incremental fetch session last sent a request (``now_ms`` clock)."""

    last_ms: float = 0.0


@dataclass
class FollowerState:
    """What the leader knows about one follower (leader role only)."""

    leo: int = -1  # -1: has not fetched in this leader epoch
    last_caught_up_ms: float = 0.0
    last_fetch_ms: float = 0.0
    last_fetch_leader_leo: int = -1
    #: the incremental fetch session that fetches this partition at ``leo`` with each of its
    #: requests (None: a sessionless fetch, or the session forgot the partition).
    clock: SessionClock | None = None

    def caught_up_ms(self, leader_leo: int) -> float:
        """When this follower was last caught up (see the module doc)."""
        if self.clock is not None and self.leo >= leader_leo:
            return max(self.last_caught_up_ms, self.clock.last_ms)
        return self.last_caught_up_ms


@dataclass(frozen=True)
class LeaderState:
    """A partition's state as the controller wrote it (LeaderAndIsr / AlterPartition)."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class Partition:
    """A partition replica: the Log plus leader epoch, ISR and high watermark."""

    def __init__(self, topic: str, partition: int, log_: Any, config: TopicConfig, broker_id: int):
        self.topic = topic
        self.partition = partition
        self.log = log_
        self.config = config
        self.broker_id = broker_id
        self.role = Role.FOLLOWER
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.topic_id = ""
        self._high_watermark = 0
        #: an ISR change sent to the controller and not answered yet (one at a time).
        self.pending_isr: tuple[int, ...] | None = None
        #: why this replica is offline when a storage error took it there (None otherwise):
        #: it answers KAFKA_STORAGE_ERROR until a LeaderAndIsr applies again.
        self.storage_error: str | None = None
        self.followers: dict[int, FollowerState] = {}
        #: the log end offset when this replica became leader of the current epoch.
        self._epoch_start_offset = 0
        #: the Log's first unstable offset as of the last log mutation (writer-owned cache).
        self._first_unstable: int | None = None
        self._append_lock = asyncio.Lock()
        #: see :data:`REORDER_WAIT_S` (an attribute so a test can lengthen it)
        self.reorder_wait_s = REORDER_WAIT_S
        #: produce calls in that wait, by producer id: woken by an append or a marker of that
        #: producer or a role change, not by every append and HW move (W waiting calls would
        #: cost W wake-ups per append of anyone)
        self._reorder_waiters: dict[int, set[asyncio.Future[None]]] = {}
        #: per producer id, (epoch, next sequence) after the batches of the latest produce
        #: queued for (or holding) the append lock; removed when that produce returns, unless a
        #: later one of the producer has replaced it
        self._queued_sequences: dict[int, tuple[int, int]] = {}
        self._changed = asyncio.Event()
        self._append_watchers: set[asyncio.Future[None]] = set()
        self._listeners: set[Callable[[Partition], None]] = set()

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.partition} {self.role.value} "
            f"epoch={self.leader_epoch} hw={self.high_watermark})"
        )

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, hw: int) -> None:
        if hw != self._high_watermark:
            self._high_watermark = hw
            _HW_CHANGES[0] += 1

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def log_start_offset(self) -> int:
        return int(self.log.log_start_offset)

    @property
    def log_end_offset(self) -> int:
        return int(self.log.log_end_offset)

    @property
    def last_stable_offset(self) -> int:
        """``min(HW, first offset of the oldest open transaction)``: READ_COMMITTED's bound."""
        fu = self._first_unstable
        return self.high_watermark if fu is None else min(self.high_watermark, fu)

    def _refresh_unstable(self) -> None:
        """Re-read the Log's first unstable offset; the writer calls it after a mutation."""
        fu = self.log.first_unstable_offset
        self._first_unstable = None if fu is None else int(fu)

    # ------------------------------------------------------------------ state (control path)

    def _set_state(self, s: LeaderState) -> None:
        self.leader_id = s.leader
        self.leader_epoch = s.leader_epoch
        self.partition_epoch = s.partition_epoch
        self.replicas = s.replicas
        self.isr = s.isr
        self.pending_isr = None

    async def become_leader(self, s: LeaderState, now_ms: float) -> bool:
        """Lead as the controller says; True when this is a new leadership (new epoch or
        was not leader). Waits for an in-flight follower append; starts the epoch in the
        epoch cache at the log end offset; the HW stays where it was (checkpoint/known)."""
        async with self._append_lock:
            new = not self.is_leader or s.leader_epoch != self.leader_epoch
            if not new:
                metrics.observe_isr_change(self.isr, s.isr)
            self._set_state(s)
            self.role = Role.LEADER
            self.storage_error = None
            if new:
                try:
                    # In memory (the file is written behind): on the loop unless a thread
                    # holds the log (a flush pass, the cleaner, retention).
                    if not self.log.assign_epoch_if_uncontended(s.leader_epoch):
                        await asyncio.to_thread(self.log.assign_epoch, s.leader_epoch)
                except Exception as exc:
                    # Not leading an epoch that could not start: offline before the append
                    # lock lets a waiting produce in (the controller moves the leadership).
                    self.go_offline(message_of(exc))
                    raise
                self._epoch_start_offset = self.log_end_offset
                self.followers = {
                    r: FollowerState(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
                    for r in s.replicas
                    if r != self.broker_id
                }
            else:
                for r in s.replicas:
                    if r != self.broker_id and r not in self.followers:
                        self.followers[r] = FollowerState(last_caught_up_ms=now_ms)
                self.followers = {r: f for r, f in self.followers.items() if r in s.replicas}
            self.high_watermark = min(self.high_watermark, self.log_end_offset)
            self._refresh_unstable()
            self._advance_high_watermark()
        self._notify()
        self._wake_reorder_waiters()
        return new

    async def become_follower(self, s: LeaderState) -> bool:
        """Follow as the controller says; True when the fetcher must (re)start with
        truncation (new leader or epoch, or was leader). Waits for an in-flight leader
        append."""
        async with self._append_lock:
            restart = (
                self.is_leader
                or s.leader_epoch != self.leader_epoch
                or (s.leader != self.leader_id)
            )
            self._set_state(s)
            self.role = Role.FOLLOWER
            self.storage_error = None
            self.followers = {}
            self.high_watermark = min(
                max(self.high_watermark, self.log_start_offset), self.log_end_offset
            )
            self._refresh_unstable()
        self._notify()
        self._wake_reorder_waiters()
        return restart

    def apply_isr_change(self, s: LeaderState) -> bool:
        """The controller accepted an AlterPartition: adopt its ISR and partition epoch when
        it is for this leadership and newer than what is known. True when applied."""
        if not self.is_leader or s.leader_epoch != self.leader_epoch:
            return False
        if s.partition_epoch <= self.partition_epoch:
            return False
        self.partition_epoch = s.partition_epoch
        metrics.observe_isr_change(self.isr, s.isr)
        self.isr = s.isr
        self.pending_isr = None
        log.info("%r: ISR is now %s (partition epoch %d)", self, list(s.isr), s.partition_epoch)
        self._advance_high_watermark()
        self._notify()
        return True

    def update_config(self, config: TopicConfig) -> None:
        if config != self.config:
            self.log.update_config(config)
            self.config = config
            self._advance_high_watermark()

    def go_offline(self, storage_error: str | None = None) -> None:
        """Stop serving: fail further calls and wake every waiting fetch stream.
        ``storage_error``: offline for that I/O error (:attr:`storage_error`)."""
        self.role = Role.OFFLINE
        self.storage_error = storage_error
        self._notify()
        self._wake_reorder_waiters()

    # ------------------------------------------------------------------ notification

    def changed(self) -> asyncio.Event:
        """The event set at the next HW advance or state change (capture, check, then wait)."""
        return self._changed

    def watch_appended(self, fut: asyncio.Future[None]) -> None:
        """Complete ``fut`` at the next leader append or state change (once; a future already
        done is left alone). Pair with :meth:`unwatch_appended`."""
        self._append_watchers.add(fut)

    def unwatch_appended(self, fut: asyncio.Future[None]) -> None:
        self._append_watchers.discard(fut)

    def add_listener(self, listener: Callable[[Partition], None]) -> None:
        """Call ``listener(self)`` at every leader append, HW advance or state change until
        :meth:`remove_listener` (it must not raise nor block)."""
        self._listeners.add(listener)

    def remove_listener(self, listener: Callable[[Partition], None]) -> None:
        self._listeners.discard(listener)

    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()
        self._notify_appended()

    def _wake_reorder_waiters(self, producer_ids: Iterable[int] | None = None) -> None:
        """Wake the produce calls waiting for earlier batches of ``producer_ids`` (None:
        all of them, at a role change): each checks again (:meth:`_await_predecessors`)."""
        if not self._reorder_waiters:
            return
        if producer_ids is None:
            woken = list(self._reorder_waiters.values())
            self._reorder_waiters = {}
        else:
            woken = [w for pid in producer_ids if (w := self._reorder_waiters.pop(pid, None))]
        for waiters in woken:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def _notify_appended(self) -> None:
        watchers, self._append_watchers = self._append_watchers, set()
        for fut in watchers:
            if not fut.done():
                fut.set_result(None)
        for listener in tuple(self._listeners):
            listener(self)

    # ------------------------------------------------------------------ leader: followers, HW

    def record_follower_fetch(
        self, replica: int, fetch_offset: int, now_ms: float, clock: SessionClock | None = None
    ) -> bool:
        """A follower asked for ``fetch_offset`` (= its LEO); ``clock``: in that incremental
        fetch session (None: sessionless). Updates its progress and the HW; True when it
        should join the ISR (:meth:`may_join_isr`)."""
        f = self.followers.get(replica)
        if not self.is_leader or f is None:
            return False
        f.clock = clock
        leo = self.log_end_offset
        if fetch_offset >= leo:
            f.last_caught_up_ms = now_ms
        elif fetch_offset >= f.last_fetch_leader_leo >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.last_fetch_leader_leo = leo
        f.last_fetch_ms = now_ms
        f.leo = fetch_offset
        self._advance_high_watermark()
        return self.may_join_isr(replica)

    def may_join_isr(self, replica: int) -> bool:
        """``replica`` is in the replicas, not in the ISR, no ISR change is pending, and its
        last fetch was caught up to the HW and to the start of this leader epoch."""
        f = self.followers.get(replica)
        return (
            self.is_leader
            and f is not None
            and replica not in self.isr
            and self.pending_isr is None
            and f.leo >= self.high_watermark
            and f.leo >= self._epoch_start_offset
        )

    def end_follower_session(self, replica: int, clock: SessionClock) -> None:
        """``replica``'s fetch session ``clock`` no longer fetches this partition."""
        f = self.followers.get(replica)
        if f is not None and f.clock is clock:
            f.clock = None

    def rejoining_followers(self, now_ms: float, lag_ms: float) -> list[int]:
        """Followers of an incremental fetch session that :meth:`may_join_isr` and were
        caught up within ``lag_ms`` (an idle session does not name the partition again, so
        the ISR pass asks here; a session that stopped sending requests, its follower hung
        with the stream open, is no word that it is caught up: :meth:`out_of_sync`'s rule)."""
        leo = self.log_end_offset
        return [
            r
            for r, f in self.followers.items()
            if f.clock is not None
            and now_ms - f.caught_up_ms(leo) <= lag_ms
            and self.may_join_isr(r)
        ]

    def _keep_followers_caught_up(self) -> None:
        """Before a leader append moves the LEO: a session follower at the LEO was caught up
        as of its session's last request (the writer calls it under the append lock)."""
        leo = self.log_end_offset
        for f in self.followers.values():
            if f.clock is not None and f.leo >= leo:
                f.last_caught_up_ms = max(f.last_caught_up_ms, f.clock.last_ms)

    def out_of_sync(self, now_ms: float, lag_ms: float) -> list[int]:
        """ISR followers that have not caught up to the leader's LEO within ``lag_ms``."""
        if not self.is_leader:
            return []
        leo = self.log_end_offset
        return [
            r
            for r in self.isr
            if r != self.broker_id
            and (f := self.followers.get(r)) is not None
            and now_ms - f.caught_up_ms(leo) > lag_ms
        ]

    def _advance_high_watermark(self) -> None:
        """HW = min LEO over the (maximal) ISR, only while the ISR has min.insync members."""
        if not self.is_leader or len(self.isr) < self.config.min_insync_replicas:
            return
        members = set(self.isr) | set(self.pending_isr or ())
        ends = [self.log_end_offset]
        for r in members:
            if r == self.broker_id:
                continue
            f = self.followers.get(r)
            if f is None or f.leo < 0:
                return
            ends.append(f.leo)
        new_hw = min(ends)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self._notify()

    # ------------------------------------------------------------------ leader appends

    def check_writable(self, acks_all: bool) -> None:
        """Raise unless this replica may take a produce request now."""
        if self.role is Role.OFFLINE:
            if self.storage_error is not None:
                raise KafkaStorageError(
                    f"{self.topic}-{self.partition} is offline: {self.storage_error}"
                )
            raise UnknownTopicOrPartitionError(f"{self.topic}-{self.partition} is not hosted here")
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition} "
                f"(leader {self.leader_id})"
            )
        if acks_all and len(self.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition}: ISR {list(self.isr)} is smaller than "
                f"min.insync.replicas={self.config.min_insync_replicas}"
            )

    async def append(
        self,
        buf: bytes | memoryview,
        batches: list[tuple[int, BatchHeader]],
        *,
        acks_all: bool,
        timeout_ms: int,
        on_queued: Callable[[], None] | None = None,
    ) -> ProduceResult:
        """Append validated batches as leader; returns once acknowledged per ``acks``.

        acks=0/1: after the local append. acks=all: once the HW has passed the last offset;
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas
        meanwhile, REQUEST_TIMED_OUT after ``timeout_ms``, NOT_LEADER_OR_FOLLOWER if the
        leadership moved. ``on_queued`` is called when this call takes its place in the
        partition's append order (the append lock queues its waiters first come, first
        served): an append that starts after it lands after this one.
        """
        if self._ahead_of_queued(batches):
            await self._await_predecessors(batches, timeout_ms)
        if on_queued is not None:
            on_queued()  # then the lock is taken or queued for in this same step
        queued = self._queue_sequences(batches)
        try:
            return await self._append_in_order(buf, batches, acks_all, timeout_ms)
        finally:
            if queued is not None and self._queued_sequences.get(queued[0]) == queued[1:]:
                del self._queued_sequences[queued[0]]

    async def _append_in_order(
        self,
        buf: bytes | memoryview,
        batches: list[tuple[int, BatchHeader]],
        acks_all: bool,
        timeout_ms: int,
    ) -> ProduceResult:
        """:meth:`append` from its place in the append lock's queue on."""
        async with self._append_lock:
            self.check_writable(acks_all)
            epoch = self.leader_epoch
            self._keep_followers_caught_up()
            try:
                inline = len(buf) <= _INLINE_APPEND_BYTES and self.config.flush_messages <= 0
                now = self.log.append_if_uncontended(buf, batches, epoch) if inline else None
                info = (
                    now
                    if now is not None
                    else await asyncio.to_thread(self.log.append, buf, batches, epoch)
                )
            except tuple(_REJECTION_REASONS) as exc:
                self._count_rejection(exc)
                raise
            self._refresh_unstable()
            self._advance_high_watermark()
            self._notify_appended()
            self._wake_reorder_waiters({h.producer_id for _, h in batches})
        duplicate = bool(info.duplicate)
        records = sum(h.record_count for _, h in batches)
        if duplicate:
            metrics.PRODUCE_DUPLICATES.labels(self.topic).inc()
        else:
            metrics.BYTES_IN.labels(self.topic).inc(len(buf))
            metrics.RECORDS_IN.labels(self.topic).inc(records)
            metrics.set_log_size(self.topic, self.partition, int(self.log.size_in_bytes))
        result = ProduceResult(
            base_offset=int(info.first_offset),
            last_offset=int(info.last_offset),
            log_append_time=int(info.log_append_time),
            log_start_offset=self.log_start_offset,
            records=records,
            size=len(buf),
            duplicate=duplicate,
        )
        if acks_all:
            await self._wait_committed(result.last_offset + 1, epoch, timeout_ms)
        return result

    def _ahead_of_queued(self, batches: list[tuple[int, BatchHeader]]) -> bool:
        """The first batch starts after its producer's next sequence, counting the batches of
        that producer's produce queued for the append lock (see :data:`REORDER_WAIT_S`)."""
        h = batches[0][1] if batches else None
        if h is not None and h.producer_id >= 0:
            queued = self._queued_sequences.get(h.producer_id)
            if queued == (h.producer_epoch, h.base_sequence):
                return False
        return self.log.ahead_of_sequence(batches)

    def _queue_sequences(
        self, batches: list[tuple[int, BatchHeader]]
    ) -> tuple[int, int, int] | None:
        """Note (producer id, epoch, next sequence) of a produce about to queue for the append
        lock, when its batches are one producer's; wake that producer's waiting produces
        (the next one may now queue behind it)."""
        if not batches:
            return None
        h = batches[-1][1]
        pid = h.producer_id
        if pid < 0 or any(b.producer_id != pid for _, b in batches):
            return None
        entry = (h.producer_epoch, (last_seq_of(h) + 1) % SEQ_MOD)
        self._queued_sequences[pid] = entry
        self._wake_reorder_waiters((pid,))
        return (pid, *entry)

    async def _await_predecessors(
        self, batches: list[tuple[int, BatchHeader]], timeout_ms: int
    ) -> None:
        """Wait until the producer's earlier batches are appended (each append wakes this),
        for at most ``reorder_wait_s`` (and the request's ``timeout_ms``), while this replica
        leads; then :meth:`append` goes on and its sequence check decides. Woken only by
        that producer's appends and markers and by role changes (:meth:`_wake_reorder_waiters`).
        Not held at all when :data:`REORDER_MAX_WAITING_PER_PRODUCER` calls of this producer
        or :data:`REORDER_MAX_WAITING` calls in all already wait here.
        """
        pid = batches[0][1].producer_id
        mine = self._reorder_waiters.get(pid)
        if (mine is not None and len(mine) >= REORDER_MAX_WAITING_PER_PRODUCER) or sum(
            map(len, self._reorder_waiters.values())
        ) >= REORDER_MAX_WAITING:
            return  # bounded: not held (see the two limits)
        metrics.PRODUCE_REORDER_WAITS.labels(self.topic).inc()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(self.reorder_wait_s, max(timeout_ms, 0) / 1000.0)
        while self.role is Role.LEADER and self._ahead_of_queued(batches):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            appended: asyncio.Future[None] = loop.create_future()
            self._reorder_waiters.setdefault(pid, set()).add(appended)
            try:
                await timeouts.wait_for(appended, remaining)
            except TimeoutError:
                return
            finally:
                waiters = self._reorder_waiters.get(pid)
                if waiters is not None:
                    waiters.discard(appended)
                    if not waiters:
                        del self._reorder_waiters[pid]

    async def write_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        timeout_ms: int,
    ) -> int:
        """Append a COMMIT/ABORT control batch as leader; returns its offset once the HW has
        passed it (acks=all: the same errors as :meth:`append`). The Log's epoch checks raise
        INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED with nothing written. The
        LSO may move at the append (the open transaction closed), so every waiter is woken."""
        async with self._append_lock:
            self.check_writable(True)
            epoch = self.leader_epoch
            self._keep_followers_caught_up()
            write = functools.partial(
                self.log.append_control,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                committed=committed,
                coordinator_epoch=coordinator_epoch,
                leader_epoch=epoch,
            )
            try:
                info = await asyncio.to_thread(write)
            except tuple(_REJECTION_REASONS) as exc:
                self._count_rejection(exc)
                raise
            self._refresh_unstable()
            self._advance_high_watermark()
            self._notify()
            self._wake_reorder_waiters((producer_id,))
        metrics.TXN_MARKERS.labels(self.topic, "commit" if committed else "abort").inc()
        metrics.set_log_size(self.topic, self.partition, int(self.log.size_in_bytes))
        offset = int(info.last_offset)
        await self._wait_committed(offset + 1, epoch, timeout_ms)
        return offset

    def _count_rejection(self, exc: Exception) -> None:
        reason = _REJECTION_REASONS.get(type(exc), "other")
        metrics.PRODUCER_REJECTIONS.labels(self.topic, reason).inc()

    async def _wait_committed(self, offset: int, epoch: int, timeout_ms: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000.0
        while True:
            changed = self.changed()
            if self.role is not Role.LEADER or self.leader_epoch != epoch:
                raise NotLeaderOrFollowerError(
                    f"leadership of {self.topic}-{self.partition} moved before the write committed"
                )
            if self.high_watermark >= offset:
                return
            if len(self.isr) < self.config.min_insync_replicas:
                raise NotEnoughReplicasAfterAppendError(
                    f"{self.topic}-{self.partition}: ISR {list(self.isr)} shrank below "
                    f"min.insync.replicas={self.config.min_insync_replicas} after the append"
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RequestTimedOutError(
                    f"{self.topic}-{self.partition}: offset {offset - 1} not replicated to the "
                    f"ISR within {timeout_ms} ms"
                )
            try:
                await timeouts.wait_for(changed.wait(), remaining)
            except TimeoutError:
                continue

    # ------------------------------------------------------------------ follower writes

    def _check_following(self, leader_epoch: int) -> bool:
        return self.role is Role.FOLLOWER and self.leader_epoch == leader_epoch

    def append_as_follower_now(
        self, records: bytes | memoryview, leader_epoch: int, leader_hw: int
    ) -> bool | None:
        """:meth:`append_as_follower` without awaiting (a follower round's appends need no task
        each), or None (nothing done) when it would have to wait: another coroutine holds the
        partition (a role change, a truncation), or the append goes to a worker thread (over
        the inline size, an fsync per append, the log held by a thread).
        Raises what :meth:`append_as_follower` raises."""
        if self._append_lock.locked():
            return None
        if not self._check_following(leader_epoch):
            return False
        if records:
            if len(records) > _INLINE_APPEND_BYTES or self.config.flush_messages > 0:
                return None
            batches = list(iter_headers(records))
            if self.log.append_as_follower_if_uncontended(records, batches) is None:
                return None
            self._refresh_unstable()
        self._follower_hw(leader_hw)
        if records:
            metrics.set_log_size(self.topic, self.partition, int(self.log.size_in_bytes))
        return True

    async def append_as_follower(
        self, records: bytes | memoryview, leader_epoch: int, leader_hw: int
    ) -> bool:
        """Append the leader's batches as they are (CRCs checked, offsets must continue the
        log) and move the HW to ``min(leader_hw, LEO)``. False (nothing written) when this
        replica no longer follows in ``leader_epoch``. Small appends run on the event loop
        (:meth:`append_as_follower_now`), others in a worker thread."""
        done = self.append_as_follower_now(records, leader_epoch, leader_hw)
        if done is not None:
            return done
        async with self._append_lock:
            if not self._check_following(leader_epoch):
                return False
            if records:
                done = False
                if len(records) <= _INLINE_APPEND_BYTES and self.config.flush_messages <= 0:
                    batches = list(iter_headers(records))
                    done = self.log.append_as_follower_if_uncontended(records, batches) is not None
                if not done:

                    def write() -> None:
                        self.log.append_as_follower(records, list(iter_headers(records)))

                    await asyncio.to_thread(write)
                self._refresh_unstable()
            self._follower_hw(leader_hw)
        if records:
            metrics.set_log_size(self.topic, self.partition, int(self.log.size_in_bytes))
        return True

    def _follower_hw(self, leader_hw: int) -> None:
        new_hw = min(max(leader_hw, self.high_watermark), self.log_end_offset)
        if new_hw != self.high_watermark:
            self.high_watermark = new_hw
            self._notify()

    async def truncate(self, offset: int, leader_epoch: int, *, fully: bool = False) -> bool:
        """Follower truncation: cut the log at ``offset`` (``fully``: empty it and restart at
        ``offset``); the HW is kept within the log. False when no longer following."""
        async with self._append_lock:
            if not self._check_following(leader_epoch):
                return False
            fn = self.log.truncate_fully_and_start_at if fully else self.log.truncate_to
            await asyncio.to_thread(fn, offset)
            self._refresh_unstable()
            self.high_watermark = min(
                max(self.high_watermark, self.log_start_offset), self.log_end_offset
            )
        log.info("%r: truncated to %d (fully=%s)", self, self.log_end_offset, fully)
        return True

    async def run_exclusive(self, fn: Callable[[], T]) -> T:
        """Run a blocking log mutation (retention, flush, close) as the partition's writer."""
        async with self._append_lock:
            try:
                return await asyncio.to_thread(fn)
            finally:
                if not self.log.closed:
                    self._refresh_unstable()

    # ------------------------------------------------------------------ reads

    def read_now(self, offset: int, max_bytes: int, max_offset: int | None) -> Any:
        """:meth:`read` without awaiting when it is a short read of the tail, else None."""
        bound = self.log_end_offset if max_offset is None else max_offset
        if not 0 <= bound - offset <= _INLINE_READ_RECORDS:
            return None
        tail = self.log.tail_bytes_from(offset)
        if tail is None or tail > _INLINE_READ_BYTES:
            return None  # a few large records, or a sealed segment: maybe a disk read
        return self.log.read(offset, max_bytes, max_offset)

    async def read(self, offset: int, max_bytes: int, max_offset: int | None) -> Any:
        """Whole batches from ``offset`` up to ``max_offset`` (a FetchSlice), off the loop
        unless it is a short read of the tail."""
        now = self.read_now(offset, max_bytes, max_offset)
        if now is not None:
            return now
        return await asyncio.to_thread(self.log.read, offset, max_bytes, max_offset)

    async def offset_for_timestamp(self, timestamp: int) -> Any:
        return await asyncio.to_thread(self.log.offset_for_timestamp, timestamp)

    async def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of the aborted transactions overlapping
        ``[start, end]`` (first offset <= end, abort marker >= start), ascending."""
        got = await asyncio.to_thread(self.log.aborted_transactions, start, end)
        return [(int(pid), int(first)) for pid, first in got]
