"""Consumer-group membership for :class:`headwater.client.consumer.AsyncConsumer`.

Join flow (run by one *join task* at a time, started from ``poll``):
FindCoordinator -> JoinGroup (MEMBER_ID_REQUIRED: rejoin with the id given) -> the leader
runs the voted assignor on the members' subscriptions -> SyncGroup -> apply the assignment:
fetch committed positions (OffsetFetch) for the partitions gained, else ``auto_offset_reset``
applies; the consumer's per-partition Fetch machinery does the rest.

Eager protocols (range, roundrobin, sticky) revoke everything before JoinGroup
(``on_revoked(all)``, after an auto-commit). Cooperative (cooperative-sticky) keeps
consuming its partitions while the join runs; after SyncGroup it revokes only what is
missing from the new assignment (``on_revoked(those)``) and, if it revoked anything, rejoins
at once so the follow-up rebalance hands them to their new owner (KIP-429).
``on_assigned`` gets the partitions gained. When membership is lost (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, or leaving after ``max_poll_interval_ms``) the owned partitions go to
``on_lost`` (``on_revoked`` when no on_lost is given) and are not committed.

Background heartbeat task: every ``heartbeat_interval_ms`` while the member is stable, so slow
processing does not drop it; REBALANCE_IN_PROGRESS asks ``poll`` to rejoin; the generation or
member errors mark the membership lost; FENCED_INSTANCE_ID is fatal (raised by the next
``poll``). If ``poll`` is not called for ``max_poll_interval_ms`` the task leaves the group
(dynamic members; static members stop heartbeating) as Kafka's consumer does.

Ownership: all on the consumer's loop; the join task is the only writer of ``generation``,
``member_id`` and ``assigned``; the heartbeat task only sets flags (``rejoin_needed``,
``lost``, ``fatal``) and sends heartbeats/LeaveGroup.

The member reaches its consumer through :class:`GroupConsumer`, the part of
:class:`~headwater.client.consumer.AsyncConsumer` it uses (so this module does not import the
consumer's, which creates the member).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from headwater import errors
from headwater.client import assignors as asg
from headwater.client.coordinator_client import CoordinatorClient
from headwater.client.metadata import Metadata
from headwater.client.types import TopicPartition
from headwater.v1 import coordinator_pb2 as cpb
from headwater.v1.errors_pb2 import ErrorCode

log = logging.getLogger(__name__)


class _Positioned(Protocol):
    @property
    def position(self) -> int | None:
        """The next offset to hand to the application (None: not known yet)."""
        ...


class GroupConsumer(Protocol):
    """What :class:`GroupMember` uses of its consumer (``AsyncConsumer`` implements it)."""

    client_id: str
    #: the request timeout, seconds
    timeout_s: float

    @property
    def _metadata(self) -> Metadata | None:
        """The consumer's metadata (None before its first poll)."""
        ...

    @property
    def _wake(self) -> asyncio.Event | None:
        """Set to wake a waiting poll (None before its first poll)."""
        ...

    @property
    def _parts(self) -> Mapping[TopicPartition, _Positioned]:
        """The fetch state of each assigned partition."""
        ...

    def _group_assign(self, partitions: set[TopicPartition]) -> None:
        """Make ``partitions`` the consumer's assignment (fetching the others stops)."""
        ...

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch ``tp`` from ``offset`` next."""
        ...


Callback = Callable[[set[TopicPartition]], Awaitable[None] | None]


@dataclass
class RebalanceListener:
    """Rebalance callbacks (plain or async functions taking a set of partitions)."""

    on_assigned: Callback | None = None
    on_revoked: Callback | None = None
    on_lost: Callback | None = None


@dataclass(frozen=True)
class GroupConfig:
    group_id: str
    session_timeout_ms: int = 45_000
    max_poll_interval_ms: int = 300_000
    heartbeat_interval_ms: int = 3_000
    group_instance_id: str = ""
    partition_assignment_strategy: tuple[str, ...] = ("range", "cooperative-sticky")
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000

    def validate(self) -> None:
        if not self.group_id:
            raise errors.InvalidGroupIdError("group_id must not be empty")
        if self.heartbeat_interval_ms <= 0 or self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise errors.InvalidConfigError(
                "heartbeat_interval_ms must be > 0 and below session_timeout_ms"
            )
        if self.max_poll_interval_ms <= 0 or self.auto_commit_interval_ms <= 0:
            raise errors.InvalidConfigError("intervals must be > 0")
        asg.resolve(self.partition_assignment_strategy)


_LOST_CODES = {ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}


class GroupMember:
    """The membership of one consumer in one group (see the module docstring)."""

    def __init__(self, consumer: GroupConsumer, coord: CoordinatorClient, cfg: GroupConfig):
        cfg.validate()
        self.c = consumer
        self.coord = coord
        self.cfg = cfg
        self.assignors = {a.name: a for a in asg.resolve(cfg.partition_assignment_strategy)}
        self.topics: set[str] = set()
        self.pattern: re.Pattern[str] | None = None
        self.listener = RebalanceListener()
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader = ""
        self.assigned: set[TopicPartition] = set()
        self.stable = False
        self.rejoin_needed = True
        self.lost = False
        self.fatal: errors.HeadwaterError | None = None
        self.last_poll = time.monotonic()
        self.next_auto_commit = time.monotonic() + cfg.auto_commit_interval_ms / 1000
        self.committed_positions: dict[TopicPartition, int] = {}
        self.join_task: asyncio.Task[None] | None = None
        self.hb_task: asyncio.Task[None] | None = None
        self.closed = False
        self.subscribed = False  # subscribe() called: this member takes part in the protocol

    # ------------------------------------------------------------ subscription

    def subscribe(
        self, topics: Iterable[str], pattern: str | None, listener: RebalanceListener | None
    ) -> None:
        self.subscribed = True
        self.topics = set(topics)
        self.pattern = re.compile(pattern) if pattern is not None else None
        self.listener = listener or RebalanceListener()
        self.rejoin_needed = True
        if self.hb_task is None:
            self.hb_task = asyncio.get_running_loop().create_task(
                self._heartbeat_loop(), name=f"heartbeat-{self.cfg.group_id}"
            )

    def _refresh_pattern(self) -> None:
        if self.pattern is None:
            return
        md = self.c._metadata
        assert md is not None
        md.maybe_refresh()
        matched = {t for t in md.view.topics if self.pattern.fullmatch(t)}
        if matched != self.topics:
            self.topics = matched
            self.rejoin_needed = True

    def cooperative(self) -> bool:
        name = self.protocol
        if name is None:  # not joined yet: what we would use first
            name = self.cfg.partition_assignment_strategy[0]
        return self.assignors[name].protocol is asg.RebalanceProtocol.COOPERATIVE

    # ------------------------------------------------------------ called from poll

    async def ensure_active(self, timeout_s: float) -> None:
        """Called by every poll: raise a fatal error, run/await the join, auto-commit."""
        self.last_poll = time.monotonic()
        if self.fatal is not None:
            raise self.fatal
        if self.pattern is not None:
            if not self.c._metadata or not self.c._metadata.view.topics:
                with contextlib.suppress(errors.HeadwaterError):
                    await self.c._metadata.refresh() if self.c._metadata else None
            self._refresh_pattern()
        if self.lost:
            await self._drop_lost()
        if self.rejoin_needed and self.join_task is None:
            self.rejoin_needed = False
            self.join_task = asyncio.get_running_loop().create_task(
                self._join(), name=f"join-{self.cfg.group_id}"
            )
        task = self.join_task
        if task is not None:
            # eager members own nothing during the join: wait for it (bounded by the poll)
            if not self.assigned or not self.cooperative():
                await asyncio.wait([task], timeout=max(0.0, timeout_s))
            if task.done():
                self.join_task = None
                exc = task.exception()
                if isinstance(exc, errors.FencedInstanceIdError):
                    self.fatal = exc
                    raise exc
                if exc is not None:
                    log.warning("group %s: join failed: %s", self.cfg.group_id, exc)
                    self.rejoin_needed = True
        if (
            self.cfg.enable_auto_commit
            and self.stable
            and time.monotonic() >= self.next_auto_commit
        ):
            await self._auto_commit()

    def wakeup(self) -> None:
        if self.c._wake is not None:
            self.c._wake.set()

    # ------------------------------------------------------------ join

    async def _call_back(self, fn: Callback | None, tps: set[TopicPartition]) -> None:
        if fn is None:
            return
        try:
            res = fn(set(tps))
            if inspect.isawaitable(res):
                await res
        except Exception:
            log.exception("rebalance listener of group %s failed", self.cfg.group_id)

    async def _drop_lost(self) -> None:
        self.lost = False
        self.stable = False
        owned, self.assigned = self.assigned, set()
        self.generation = -1
        self.c._group_assign(set())
        if owned:
            await self._call_back(self.listener.on_lost or self.listener.on_revoked, owned)

    async def _revoke(self, tps: set[TopicPartition]) -> None:
        if not tps:
            return
        if self.cfg.enable_auto_commit:
            await self._auto_commit(only=tps)
        await self._call_back(self.listener.on_revoked, tps)
        self.assigned -= tps
        self.c._group_assign(self.assigned)

    async def _join(self) -> None:
        try:
            await self._join_inner()
        finally:
            self.wakeup()

    async def _join_inner(self) -> None:
        self.stable = False
        # What this member owned before the rebalance, reported in its subscription so that
        # sticky assignors keep placements. Eager protocols revoke everything before joining,
        # so it is recorded first (Kafka's StickyAssignor reports its previous assignment the
        # same way); cooperative members still own what they report.
        owned_before = tuple(sorted(tp for tp in self.assigned if tp.topic in self.topics))
        generation_before = self.generation
        if not self.cooperative():
            await self._revoke(set(self.assigned))
        else:  # cooperative: give up only partitions of topics no longer subscribed
            await self._revoke({tp for tp in self.assigned if tp.topic not in self.topics})
        while not self.closed:
            if self.lost:
                await self._drop_lost()
                owned_before = ()
            cooperative = self.cooperative()
            sub = asg.Subscription(
                topics=tuple(sorted(self.topics)),
                owned_partitions=tuple(sorted(self.assigned)) if cooperative else owned_before,
                generation_id=self.generation if cooperative else generation_before,
            )
            meta = asg.encode_subscription(sub)
            req = cpb.JoinGroupRequest(
                group_id=self.cfg.group_id,
                session_timeout_ms=self.cfg.session_timeout_ms,
                rebalance_timeout_ms=self.cfg.max_poll_interval_ms,
                member_id=self.member_id,
                group_instance_id=self.cfg.group_instance_id,
                protocol_type=asg.PROTOCOL_TYPE,
                protocols=[
                    cpb.JoinGroupProtocol(name=n, metadata=meta)
                    for n in self.cfg.partition_assignment_strategy
                ],
                client_id=self.c.client_id,
            )
            budget = self.cfg.max_poll_interval_ms / 1000 + self.c.timeout_s
            resp = await self.coord.call(self.cfg.group_id, "JoinGroup", req, timeout_s=budget)
            if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id
                continue
            if await self._retry_after(resp.error_code, resp.error_message):
                continue
            self.member_id = resp.member_id
            self.generation = resp.generation_id
            self.protocol = resp.protocol_name
            self.leader = resp.leader
            assignments: list[cpb.SyncGroupAssignment] = []
            if resp.leader == resp.member_id and not resp.skip_assignment:
                assignments = await self._lead(resp)
            sreq = cpb.SyncGroupRequest(
                group_id=self.cfg.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.cfg.group_instance_id,
                assignments=assignments,
            )
            sresp = await self.coord.call(self.cfg.group_id, "SyncGroup", sreq)
            if await self._retry_after(sresp.error_code, sresp.error_message):
                continue
            await self._apply(set(asg.decode_assignment(sresp.assignment).partitions))
            return

    async def _retry_after(self, code: int, message: str) -> bool:
        """True to rejoin after a JoinGroup/SyncGroup error; raises the fatal ones."""
        if code == ErrorCode.NONE:
            return False
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return True
        if code in _LOST_CODES:
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.lost = bool(self.assigned)
            self.generation = -1
            return True
        errors.raise_for_code(code, message)
        return False

    async def _lead(self, resp: cpb.JoinGroupResponse) -> list[cpb.SyncGroupAssignment]:
        members = {
            m.member_id: asg.decode_subscription(m.metadata, m.group_instance_id)
            for m in resp.members
        }
        topics = {t for s in members.values() for t in s.topics}
        md = self.c._metadata
        assert md is not None
        # Always assign from fresh metadata (as Kafka's leader does): a rebalance is often
        # *caused* by a partition-count change the cached metadata has not seen yet.
        with contextlib.suppress(errors.HeadwaterError):
            await md.refresh()
        counts = {t: n for t in topics if (n := md.view.partition_count(t)) is not None}
        plan = self.assignors[resp.protocol_name].assign(members, counts)
        log.info(
            "group %s generation %d: leader %s assigned %s",
            self.cfg.group_id,
            resp.generation_id,
            self.member_id,
            {m: len(v) for m, v in plan.items()},
        )
        return [
            cpb.SyncGroupAssignment(member_id=m, assignment=asg.encode_assignment(tps))
            for m, tps in plan.items()
        ]

    async def _apply(self, new: set[TopicPartition]) -> None:
        revoked = self.assigned - new
        if revoked:  # cooperative: give these up, then rejoin for the follow-up round
            await self._revoke(revoked)
            self.rejoin_needed = True
        added = new - self.assigned
        self.assigned = set(new)
        self.c._group_assign(self.assigned)
        if added:
            found = await self.fetch_committed(added)
            for tp, off in found.items():
                if off is not None:
                    self.c.seek(tp, off)
                    self.committed_positions[tp] = off
        self.stable = True
        await self._call_back(self.listener.on_assigned, added)

    # ------------------------------------------------------------ offsets

    async def fetch_committed(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """Committed offsets; a read_committed consumer asks for stable ones (require_stable)
        and retries UNSTABLE_OFFSET_COMMIT (a transaction's pending commit) until the request
        timeout."""
        by_topic: dict[str, list[int]] = {}
        wanted = [TopicPartition(*tp) for tp in tps]
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        stable = bool(getattr(self.c, "read_committed", False))
        req = cpb.OffsetFetchRequest(
            group_id=self.cfg.group_id,
            partitions=[cpb.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()],
            require_stable=stable,
        )
        deadline = time.monotonic() + self.coord.timeout_s
        while True:
            resp = await self.coord.call(self.cfg.group_id, "OffsetFetch", req)
            errors.raise_for_code(resp.error_code, resp.error_message)
            out: dict[TopicPartition, int | None] = dict.fromkeys(wanted)
            try:
                for o in resp.offsets:
                    tp = TopicPartition(o.topic, o.partition)
                    if tp in out:
                        errors.raise_for_code(o.error_code, f"{o.topic}[{o.partition}]")
                        out[tp] = o.offset if o.offset >= 0 else None
            except errors.UnstableOffsetCommitError:
                if time.monotonic() + self.coord.backoff_s >= deadline:
                    raise
                await asyncio.sleep(self.coord.backoff_s)
                continue
            return out

    def consumed_positions(
        self, only: set[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Positions (after the last record poll returned) of owned partitions."""
        out = {}
        for tp in self.assigned if only is None else only & self.assigned:
            st = self.c._parts.get(tp)
            if st is not None and st.position is not None:
                out[tp] = st.position
        return out

    async def commit_response(
        self, offsets: Mapping[TopicPartition, tuple[int, str]]
    ) -> cpb.OffsetCommitResponse:
        """Send one OffsetCommit of ``offsets`` (``tp -> (offset, metadata)``) with this
        generation and member and return the coordinator's answer as is (whole-request and
        per-partition error codes); a lost membership or a rebalance marks the member for a
        rejoin. Nothing is raised for error codes: the caller reads them."""
        for off, _ in offsets.values():
            if off < 0:
                raise errors.InvalidRequestError(f"cannot commit a negative offset {off}")
        req = cpb.OffsetCommitRequest(
            group_id=self.cfg.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.cfg.group_instance_id,
            partitions=[
                cpb.OffsetCommitPartition(
                    topic=tp.topic, partition=tp.partition, offset=o, leader_epoch=-1, metadata=md
                )
                for tp, (o, md) in sorted(offsets.items())
            ],
        )
        resp: cpb.OffsetCommitResponse = await self.coord.call(
            self.cfg.group_id, "OffsetCommit", req
        )
        if resp.error_code in _LOST_CODES:
            if resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.lost = bool(self.assigned)
            self.rejoin_needed = True
        elif resp.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.rejoin_needed = True
        return resp

    async def commit(self, offsets: Mapping[TopicPartition, int] | None) -> None:
        """Commit ``offsets`` (default: the consumed positions) with this generation."""
        todo = dict(self.consumed_positions() if offsets is None else offsets)
        if not todo:
            return
        resp = await self.commit_response({tp: (o, "") for tp, o in todo.items()})
        errors.raise_for_code(resp.error_code, resp.error_message)
        for p in resp.partitions:
            errors.raise_for_code(p.error_code, p.error_message or f"{p.topic}[{p.partition}]")
        self.committed_positions.update(todo)

    async def _auto_commit(self, only: set[TopicPartition] | None = None) -> None:
        self.next_auto_commit = time.monotonic() + self.cfg.auto_commit_interval_ms / 1000
        todo = {
            tp: o
            for tp, o in self.consumed_positions(only).items()
            if self.committed_positions.get(tp) != o
        }
        if not todo:
            return
        try:
            await self.commit(todo)
        except errors.HeadwaterError as exc:
            log.warning("group %s: auto-commit failed: %s", self.cfg.group_id, exc)

    # ------------------------------------------------------------ heartbeat and leave

    async def _heartbeat_loop(self) -> None:
        interval = self.cfg.heartbeat_interval_ms / 1000
        while not self.closed:
            await asyncio.sleep(interval)
            if not self.stable or self.fatal is not None:
                continue
            if time.monotonic() - self.last_poll > self.cfg.max_poll_interval_ms / 1000:
                log.warning(
                    "group %s: poll() not called for max_poll_interval_ms=%d; leaving",
                    self.cfg.group_id,
                    self.cfg.max_poll_interval_ms,
                )
                await self._leave("consumer poll timeout has expired")
                continue
            req = cpb.HeartbeatRequest(
                group_id=self.cfg.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.cfg.group_instance_id,
            )
            try:
                resp = await self.coord.call(
                    self.cfg.group_id, "Heartbeat", req, timeout_s=interval * 2
                )
            except errors.HeadwaterError as exc:
                log.debug("group %s: heartbeat failed: %s", self.cfg.group_id, exc)
                continue
            if not self.stable or resp.error_code == ErrorCode.NONE:
                continue
            if resp.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.rejoin_needed = True
            elif resp.error_code in _LOST_CODES:
                if resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self.stable = False
                self.lost = True
                self.rejoin_needed = True
            elif resp.error_code == ErrorCode.FENCED_INSTANCE_ID:
                self.stable = False
                self.fatal = errors.FencedInstanceIdError(resp.error_message or "fenced")
            else:
                log.warning("group %s: heartbeat: %s", self.cfg.group_id, resp.error_message)
            self.wakeup()

    async def _leave(self, reason: str, *, static: bool = False) -> None:
        """Leave the group (dynamic members only, and static ones too with ``static``: the
        LeaveGroup names the instance id); the owned partitions become lost."""
        self.stable = False
        instance = self.cfg.group_instance_id
        # a static member is named by its instance id even before its JoinGroup answered
        if (static and instance) or (not instance and self.member_id):
            req = cpb.LeaveGroupRequest(
                group_id=self.cfg.group_id,
                members=[
                    cpb.MemberIdentity(
                        member_id=self.member_id,
                        group_instance_id=self.cfg.group_instance_id,
                        reason=reason,
                    )
                ],
            )
            try:
                await self.coord.call(self.cfg.group_id, "LeaveGroup", req)
            except errors.HeadwaterError as exc:
                log.info("group %s: LeaveGroup failed: %s", self.cfg.group_id, exc)
            self.member_id = ""
        self.generation = -1
        self.lost = bool(self.assigned)
        self.rejoin_needed = True

    async def close(self, *, leave_static: bool = False) -> None:
        """Commit (auto-commit), revoke, LeaveGroup (not for static members unless
        ``leave_static``, as Kafka's ``close(CloseOptions ... LEAVE_GROUP)``), stop tasks."""
        if self.closed:
            return
        if self.join_task is not None:
            self.join_task.cancel()
            with contextlib.suppress(BaseException):
                await self.join_task
        if self.stable and self.assigned:
            await self._revoke(set(self.assigned))
        self.closed = True
        if self.hb_task is not None:
            self.hb_task.cancel()
            with contextlib.suppress(BaseException):
                await self.hb_task
        instance = self.cfg.group_instance_id
        if (leave_static and instance) or (not instance and self.member_id):
            await self._leave("the consumer is being closed", static=leave_static)
