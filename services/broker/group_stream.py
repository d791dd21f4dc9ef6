"""``GroupStreamService.Consume``: the group stream (proto/headwater/v1/group_stream.proto).

A client in any language consumes as a member of a consumer group over one bidirectional
stream. The broker that holds the stream is the member's *agent*: it runs a classic group
member for it (the Python client's :class:`headwater.client.consumer.AsyncConsumer` with a
``group_id``: JoinGroup/SyncGroup/Heartbeat against the group coordinator, the range assignor,
OffsetFetch, one Fetch stream per assigned partition from its leader), so stream members and
classic members share one group, one protocol and one assignment (docs/groups.md, "Group
stream").

The agent's member:

* static membership: ``group_instance_id`` = the stream's ``member_id`` (a UUID when the Open
  leaves it empty); the session timeout is the stream's (``session_timeout_ms``; 0: the
  server's default), heartbeats every third of it (at most 3 s);
* eager rebalancing (the range assignor): at the start of a rebalance everything is revoked
  before the JoinGroup is sent, so no record of a partition is sent after the member gave it
  up, and a partition is never delivered to two live members at once; the revocation is
  announced with an Assignment of the old generation and no partitions when the rebalance
  does not end within one poll, the new assignment with the next Assignment;
* no auto-commit: offsets are committed only by the client's Commit messages, with the current
  generation and member; partitions not assigned in the current generation are refused per
  partition (ILLEGAL_GENERATION) and never sent to the coordinator.

Flow control (Pub/Sub StreamingPull's): the client grants records and bytes (Open's first
credit, Credit messages; they add up, capped at ``--group-stream-max-credit-records`` and
``--group-stream-max-credit-bytes``). Records are sent only within the credit: bytes are the
keys' and values' lengths (RECORDS) or the batches' (BATCHES). A dimension the client never
granted is not limited (a client granting only records is limited by records alone); with
nothing ever granted nothing is sent. One record (RECORDS) or one batch (BATCHES) larger than
the remaining credit is still sent when nothing was sent since the last grant, so a stream
never stalls. What was fetched but not sent is not lost: the partition is sought back to the
first record not sent. BATCHES delivers the raw record batches as ``Broker.Fetch`` returns
them: a batch may begin before the position (the committed offset of the Assignment, or the
previous Records' ``next_offset``): records below it are to be skipped, as a Kafka client does.

Liveness: a client that sends nothing for the session timeout ends the stream with
DEADLINE_EXCEEDED (REQUEST_TIMED_OUT in the trailer); the client closing its side, the stream
being cancelled or any error ends the member with a LeaveGroup naming its instance id, so it
does not linger for a session timeout.

Cost bounds: at most ``--group-stream-max-streams`` streams per broker (more:
THROTTLING_QUOTA_EXCEEDED); a stream holds at most ``--group-stream-fetch-buffer-bytes`` (plus
one fetch response) of fetched data per assigned partition, and the credit bounds what is in
flight towards the client.

Authorization is the interceptor's (:mod:`headwater.platform.auth.rules`): the Open needs
Read on the group and Read on each topic, checked for the stream's authenticated principal
before the handler sees the first message; the agent's own calls carry the broker's internal
identity.

Ownership: one task per stream (the handler's) owns the stream's state, the member and the
credit; a reader task only moves the client's messages into a bounded queue and records when
the client was last heard from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import grpc

from headwater import errors, timeouts
from headwater.client.consumer import AsyncConsumer
from headwater.client.fetched import FetchedBatch, offset_at
from headwater.client.security import ClientSecurity
from headwater.client.types import TopicPartition
from headwater.platform.auth.interceptor import fail
from headwater.v1 import broker_pb2, group_stream_pb2_grpc
from headwater.v1 import group_stream_pb2 as gs
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.handlers.fetch_records import to_proto_record
from services.broker.metadata_cache import MetadataCache

log = logging.getLogger(__name__)

SERVICE_NAME = "headwater.v1.GroupStreamService"
MIB = 1024 * 1024
#: How long one poll of the member waits for records before the stream looks at the client's
#: messages again (and so the longest a Commit waits for its answer when nothing arrives).
POLL_MS = 100
#: The session timeouts the group coordinator accepts (services/coordinator/membership.py).
MIN_SESSION_TIMEOUT_MS = 100
MAX_SESSION_TIMEOUT_MS = 1_800_000
#: How long an Open naming a topic this broker's metadata does not know yet waits for it.
UNKNOWN_TOPIC_WAIT_S = 2.0
#: Bound of the client messages read ahead of the stream's task.
QUEUE_SIZE = 64
#: Bound of leaving the group when the stream ends.
LEAVE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class StreamLimits:
    """The broker's bounds on group streams (docs/configuration.md, broker flags)."""

    #: Concurrent streams per broker (``--group-stream-max-streams``).
    max_streams: int = 1000
    #: Records granted and not yet received (``--group-stream-max-credit-records``).
    max_credit_records: int = 10_000
    #: Bytes granted and not yet received (``--group-stream-max-credit-bytes``).
    max_credit_bytes: int = 64 * MIB
    #: Fetched bytes buffered per assigned partition (``--group-stream-fetch-buffer-bytes``).
    fetch_buffer_bytes: int = 1 * MIB
    #: The session timeout of an Open that leaves it 0 (group.session.timeout.ms's default).
    default_session_timeout_ms: int = 45_000

    def validate(self) -> None:
        if min(self.max_streams, self.max_credit_records, self.max_credit_bytes) <= 0:
            raise errors.InvalidConfigError("group stream limits must be positive")
        if self.fetch_buffer_bytes <= 0:
            raise errors.InvalidConfigError("--group-stream-fetch-buffer-bytes must be positive")


_RESET = {
    gs.OFFSET_RESET_UNSPECIFIED: "latest",
    gs.OFFSET_RESET_LATEST: "latest",
    gs.OFFSET_RESET_EARLIEST: "earliest",
}
_ISOLATION = {
    broker_pb2.READ_UNCOMMITTED: "read_uncommitted",
    broker_pb2.READ_COMMITTED: "read_committed",
}
_FORMATS = (gs.DELIVERY_FORMAT_UNSPECIFIED, gs.DELIVERY_FORMAT_RECORDS, gs.DELIVERY_FORMAT_BATCHES)


def check_open(req: gs.ConsumeRequest | None) -> gs.ConsumeOpen:
    """The Open of a stream's first message; INVALID_REQUEST (or INVALID_SESSION_TIMEOUT)
    for anything else or an Open that cannot be served."""
    if req is None or req.WhichOneof("request") != "open":
        raise errors.InvalidRequestError("the first message of a group stream must be Open")
    o = req.open
    if not o.group_id:
        raise errors.InvalidRequestError("Open.group_id must not be empty")
    if not o.topics or any(not t for t in o.topics):
        raise errors.InvalidRequestError("Open.topics must name at least one topic, none empty")
    if o.session_timeout_ms and not (
        MIN_SESSION_TIMEOUT_MS <= o.session_timeout_ms <= MAX_SESSION_TIMEOUT_MS
    ):
        raise errors.InvalidSessionTimeoutError(
            f"Open.session_timeout_ms must be 0 or in [{MIN_SESSION_TIMEOUT_MS}, "
            f"{MAX_SESSION_TIMEOUT_MS}], got {o.session_timeout_ms}"
        )
    if o.offset_reset not in _RESET:
        raise errors.InvalidRequestError(f"unknown Open.offset_reset {o.offset_reset}")
    if o.format not in _FORMATS:
        raise errors.InvalidRequestError(f"unknown Open.format {o.format}")
    if o.isolation_level not in _ISOLATION:
        raise errors.InvalidRequestError(f"unknown Open.isolation_level {o.isolation_level}")
    check_credit(o.credit_records, o.credit_bytes)
    return o


def check_credit(records: int, nbytes: int) -> None:
    if records < 0 or nbytes < 0:
        raise errors.InvalidRequestError(
            f"credit must not be negative, got records={records} bytes={nbytes}"
        )


class Credit:
    """What the client has granted and not yet received (see the module doc)."""

    def __init__(self, limits: StreamLimits) -> None:
        self._limits = limits
        self.records = 0
        self.bytes = 0
        self.records_granted = False
        self.bytes_granted = False
        #: nothing sent since the last grant: one oversized record/batch may go
        self.fresh = False

    def grant(self, records: int, nbytes: int) -> None:
        check_credit(records, nbytes)
        if records:
            self.records_granted = True
            self.records = min(self.records + records, self._limits.max_credit_records)
        if nbytes:
            self.bytes_granted = True
            self.bytes = min(self.bytes + nbytes, self._limits.max_credit_bytes)
        if records or nbytes:
            self.fresh = True

    def open(self) -> bool:
        """Whether anything at all may be sent now."""
        if not (self.records_granted or self.bytes_granted):
            return False
        return (not self.records_granted or self.records > 0) and (
            not self.bytes_granted or self.bytes > 0
        )

    def max_records(self) -> int | None:
        """The most records one poll may take (None: not limited by records)."""
        if not self.open():
            return 0
        return self.records if self.records_granted else None

    def allows(self, records: int, nbytes: int) -> bool:
        """Whether ``records`` records of ``nbytes`` bytes (one record or one batch) may go."""
        if not self.open():
            return False
        rec_ok = not self.records_granted or records <= self.records
        bytes_ok = not self.bytes_granted or nbytes <= self.bytes
        return (rec_ok and bytes_ok) or self.fresh

    def take(self, records: int, nbytes: int) -> None:
        self.fresh = False
        if self.records_granted:
            self.records = max(0, self.records - records)
        if self.bytes_granted:
            self.bytes = max(0, self.bytes - nbytes)


def _record_size(key: bytes | None, value: bytes | None) -> int:
    return len(key or b"") + len(value or b"")


class _Closed(Exception):
    """The client closed its side of the stream."""


class GroupStream:
    """One stream's member, credit and conversation (one task: :meth:`run`)."""

    def __init__(
        self,
        open_: gs.ConsumeOpen,
        bootstrap: str,
        security: ClientSecurity | None,
        limits: StreamLimits,
    ) -> None:
        self.open = open_
        self.member_id = open_.member_id or f"stream-{uuid.uuid4()}"
        self.session_ms = open_.session_timeout_ms or limits.default_session_timeout_ms
        self.batches = open_.format == gs.DELIVERY_FORMAT_BATCHES
        self.credit = Credit(limits)
        self.credit.grant(open_.credit_records, open_.credit_bytes)
        heartbeat_ms = max(1, min(3_000, self.session_ms // 3))
        self.consumer = AsyncConsumer(
            bootstrap,
            group_id=open_.group_id,
            group_instance_id=self.member_id,
            session_timeout_ms=self.session_ms,
            heartbeat_interval_ms=heartbeat_ms,
            # the agent polls every POLL_MS: the rebalance timeout is how long the coordinator
            # waits for it to rejoin, and the poll interval never runs out while it lives
            max_poll_interval_ms=max(self.session_ms, 10_000),
            partition_assignment_strategy=("range",),
            enable_auto_commit=False,
            auto_offset_reset=_RESET[open_.offset_reset],
            isolation_level=_ISOLATION[open_.isolation_level],
            max_buffer_bytes=limits.fetch_buffer_bytes,
            max_partition_fetch_bytes=limits.fetch_buffer_bytes,
            client_id=open_.client_id or "group-stream",
            security=security,
        )
        self.queue: asyncio.Queue[gs.ConsumeRequest | BaseException | None] = asyncio.Queue(
            QUEUE_SIZE
        )
        self.last_heard = time.monotonic()
        #: the last Assignment sent: generation and partitions (records only for these)
        self.sent_generation = -1
        self.sent: frozenset[TopicPartition] = frozenset()
        self.sent_once = False

    # ------------------------------------------------------------ the client's side

    async def _read(self, requests: AsyncIterator[gs.ConsumeRequest]) -> None:
        """Move the client's messages into the queue (the reader task); None: closed."""
        try:
            async for req in requests:
                self.last_heard = time.monotonic()
                await self.queue.put(req)
            await self.queue.put(None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the limit gate's refusal, a broken stream
            await self.queue.put(exc)

    async def _handle(self, req: gs.ConsumeRequest) -> Iterator[gs.ConsumeResponse]:
        kind = req.WhichOneof("request")
        if kind == "credit":
            self.credit.grant(req.credit.records, req.credit.bytes)
        elif kind == "commit":
            return iter([gs.ConsumeResponse(commit_result=await self._commit(req.commit))])
        elif kind == "open":
            raise errors.InvalidRequestError("a group stream takes one Open, as its first message")
        elif kind != "keep_alive":
            raise errors.InvalidRequestError("an empty ConsumeRequest")
        return iter(())

    async def _commit(self, c: gs.ConsumeCommit) -> gs.ConsumeCommitResult:
        out = gs.ConsumeCommitResult(commit_id=c.commit_id)
        for o in c.offsets:
            if o.offset < 0:
                out.error_code = ErrorCode.INVALID_REQUEST
                out.error_message = f"cannot commit a negative offset {o.offset}"
                return out
        stable = not self.consumer.rebalancing
        generation = self.consumer.generation
        owned = self.sent if stable and generation == self.sent_generation else frozenset()
        todo: dict[TopicPartition, tuple[int, str]] = {}
        for o in c.offsets:
            tp = TopicPartition(o.topic, o.partition)
            if tp in owned:
                todo[tp] = (o.offset, o.metadata)
            else:
                out.partitions.add(
                    topic=o.topic,
                    partition=o.partition,
                    error_code=ErrorCode.ILLEGAL_GENERATION,
                    error_message=(
                        f"{o.topic}[{o.partition}] is not assigned to member "
                        f"{self.member_id!r} in generation {generation}"
                    ),
                )
        if not todo:
            return out
        try:
            resp = await self.consumer.commit_detailed(todo)
        except errors.HeadwaterError as exc:
            code, message = exc.code, str(exc)
        else:
            code, message = resp.error_code, resp.error_message
            for p in resp.partitions:
                out.partitions.add(
                    topic=p.topic,
                    partition=p.partition,
                    error_code=p.error_code,
                    error_message=p.error_message,
                )
        if code != ErrorCode.NONE:
            out.error_code = code  # type: ignore[assignment]
            out.error_message = message
            answered = {(p.topic, p.partition) for p in out.partitions}
            for tp in todo:
                if (tp.topic, tp.partition) not in answered:
                    out.partitions.add(
                        topic=tp.topic,
                        partition=tp.partition,
                        error_code=code,
                        error_message=message,
                    )
        return out

    # ------------------------------------------------------------ the member's side

    async def _assignment(self) -> gs.ConsumeResponse | None:
        """The Assignment to send now, if the member's assignment changed (module doc)."""
        assigned = frozenset(self.consumer.assignment())
        generation = self.consumer.generation
        if not self.consumer.rebalancing:
            if self.sent_once and generation == self.sent_generation and assigned == self.sent:
                return None
            committed = await self.consumer.committed(assigned) if assigned else {}
            parts = [
                gs.ConsumeAssignedPartition(
                    topic=tp.topic,
                    partition=tp.partition,
                    committed_offset=-1 if committed.get(tp) is None else committed[tp],
                )
                for tp in sorted(assigned)
            ]
            self.sent_generation, self.sent, self.sent_once = generation, assigned, True
            return gs.ConsumeResponse(
                assignment=gs.ConsumeAssignment(
                    member_id=self.member_id, generation_id=generation, partitions=parts
                )
            )
        if self.sent and not assigned:  # revoked for a rebalance still under way
            self.sent = frozenset()
            return gs.ConsumeResponse(
                assignment=gs.ConsumeAssignment(
                    member_id=self.member_id, generation_id=self.sent_generation
                )
            )
        return None

    def _deliver(self, fetched: list[FetchedBatch]) -> Iterator[gs.ConsumeResponse]:
        """Records messages for ``fetched`` within the credit; partitions whose records are
        not all sent are sought back to the first one not sent."""
        rewind: dict[TopicPartition, int] = {}
        for fb in fetched:
            tp = fb.tp
            if tp in rewind:
                continue
            if tp not in self.sent:  # not announced in an Assignment (cannot happen): refetch
                rewind[tp] = offset_at(fb.batch, fb.start)
                continue
            msg = self._batch(fb) if self.batches else self._records(fb)
            if msg is None:
                rewind[tp] = offset_at(fb.batch, fb.start)
                continue
            yield gs.ConsumeResponse(records=msg)
            if msg.next_offset < offset_at(fb.batch, fb.stop):  # the credit ran out inside
                rewind[tp] = msg.next_offset
        for tp, off in rewind.items():
            self.consumer.seek(tp, off)

    def _batch(self, fb: FetchedBatch) -> gs.ConsumeRecords | None:
        h = fb.batch.header
        whole_rest = h.record_count - fb.start  # the raw batch carries all of them
        size = len(fb.batch.raw)
        if not self.credit.allows(whole_rest, size):
            return None
        self.credit.take(whole_rest, size)
        return gs.ConsumeRecords(
            topic=fb.tp.topic,
            partition=fb.tp.partition,
            generation_id=self.sent_generation,
            batches=bytes(fb.batch.raw),  # copied only once it is sent
            high_watermark=self.consumer.highwater(fb.tp),
            next_offset=h.next_offset,
        )

    def _records(self, fb: FetchedBatch) -> gs.ConsumeRecords | None:
        out: list[broker_pb2.Record] = []
        for r in fb.records():
            size = _record_size(r.key, r.value)
            if not self.credit.allows(1, size):
                break
            self.credit.take(1, size)
            out.append(to_proto_record(r.offset, r.timestamp, r.key, r.value, r.headers))
        if not out:
            return None
        whole = len(out) == len(fb)
        return gs.ConsumeRecords(
            topic=fb.tp.topic,
            partition=fb.tp.partition,
            generation_id=self.sent_generation,
            records=out,
            high_watermark=self.consumer.highwater(fb.tp),
            next_offset=offset_at(fb.batch, fb.stop) if whole else out[-1].offset + 1,
        )

    async def _poll(self) -> list[FetchedBatch]:
        """One poll of the member (joins, rebalances, fetches); retriable failures (a leader
        or coordinator moving) are retried by the next poll, the others end the stream."""
        try:
            fetched = await self.consumer.poll_batches(
                timeout_ms=POLL_MS, max_records=self.credit.max_records()
            )
        except errors.HeadwaterError as exc:
            if not exc.retriable:
                raise
            log.debug("group stream %s: poll: %s; retrying", self.member_id, exc)
            await asyncio.sleep(POLL_MS / 1000)
            return []
        if self.batches:  # whole batches only: a batch cut by the record credit waits
            kept: list[FetchedBatch] = []
            cut: set[TopicPartition] = set()
            for fb in fetched:
                if fb.tp in cut:
                    continue
                if fb.stop < fb.batch.header.record_count and not (self.credit.fresh and not kept):
                    cut.add(fb.tp)
                    self.consumer.seek(fb.tp, offset_at(fb.batch, fb.start))
                    continue
                kept.append(fb)
            fetched = kept
        return fetched

    # ------------------------------------------------------------ the conversation

    async def run(
        self, requests: AsyncIterator[gs.ConsumeRequest]
    ) -> AsyncIterator[gs.ConsumeResponse]:
        """The stream after its Open: the member's life (module doc)."""
        reader = asyncio.get_running_loop().create_task(
            self._read(requests), name=f"group-stream-read-{self.member_id}"
        )
        self.consumer.subscribe(list(dict.fromkeys(self.open.topics)))
        log.info(
            "group stream: member %s joins group %s for %s",
            self.member_id,
            self.open.group_id,
            list(self.open.topics),
        )
        try:
            while True:
                while not self.queue.empty():
                    item = self.queue.get_nowait()
                    if item is None:
                        return  # the client closed its side: leave (finally)
                    if isinstance(item, BaseException):
                        raise item
                    for resp in await self._handle(item):
                        yield resp
                if time.monotonic() - self.last_heard > self.session_ms / 1000:
                    raise errors.RequestTimedOutError(
                        f"group stream member {self.member_id!r}: nothing received from the "
                        f"client for session_timeout_ms={self.session_ms}; it left the group"
                    )
                fetched = await self._poll()
                try:
                    assignment = await self._assignment()
                except errors.HeadwaterError as exc:
                    if not exc.retriable:
                        raise
                    log.debug("group stream %s: committed offsets: %s", self.member_id, exc)
                    assignment = None
                    for fb in fetched:  # sent with the Assignment, once it is known
                        self.consumer.seek(fb.tp, offset_at(fb.batch, fb.start))
                    fetched = []
                if assignment is not None:
                    yield assignment
                for resp in self._deliver(fetched):
                    yield resp
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            await self.close()

    async def close(self) -> None:
        """Leave the group at once (LeaveGroup with the instance id), bounded."""
        try:
            await timeouts.wait_for(
                asyncio.shield(self.consumer.close(leave_group=True)), LEAVE_TIMEOUT_S
            )
        except (TimeoutError, errors.HeadwaterError, grpc.RpcError) as exc:
            log.warning("group stream %s: leaving the group failed: %s", self.member_id, exc)
        log.info("group stream: member %s left group %s", self.member_id, self.open.group_id)


class GroupStreamServicer(group_stream_pb2_grpc.GroupStreamServiceServicer):
    """Serves ``Consume``: admits the stream (limits, Open) and runs its :class:`GroupStream`."""

    def __init__(
        self,
        metadata: MetadataCache,
        bootstrap: Callable[[], str],
        security: ClientSecurity | None = None,
        limits: StreamLimits | None = None,
    ) -> None:
        self._metadata = metadata
        self._bootstrap = bootstrap
        self._security = security
        self.limits = limits or StreamLimits()
        self.limits.validate()
        self.active = 0

    async def _check_topics(self, topics: list[str]) -> None:
        deadline = time.monotonic() + UNKNOWN_TOPIC_WAIT_S
        while True:
            missing = [t for t in topics if self._metadata.topic(t) is None]
            if not missing:
                return
            if time.monotonic() >= deadline:
                raise errors.UnknownTopicOrPartitionError(f"unknown topics {missing}")
            await asyncio.sleep(0.1)

    async def Consume(
        self,
        request_iterator: AsyncIterator[gs.ConsumeRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[gs.ConsumeResponse]:
        try:
            if self.active >= self.limits.max_streams:
                raise errors.ThrottlingQuotaExceededError(
                    f"this broker serves at most {self.limits.max_streams} group streams "
                    "(--group-stream-max-streams)"
                )
            self.active += 1
            try:
                it = aiter(request_iterator)
                try:
                    first = await timeouts.wait_for(
                        anext(it), self.limits.default_session_timeout_ms / 1000
                    )
                except StopAsyncIteration:
                    first = None
                except TimeoutError:
                    raise errors.RequestTimedOutError(
                        "no Open within the default session timeout"
                    ) from None
                open_ = check_open(first)
                await self._check_topics(list(open_.topics))
                stream = GroupStream(open_, self._bootstrap(), self._security, self.limits)
                async for resp in stream.run(it):
                    yield resp
            finally:
                self.active -= 1
        except errors.HeadwaterError as exc:
            await fail(context, exc)


def registrar(
    metadata: MetadataCache,
    bootstrap: Callable[[], str],
    security: ClientSecurity | None = None,
    limits: StreamLimits | None = None,
) -> Callable[[grpc.aio.Server], str]:
    """A ``start_server`` register callable adding the servicer; returns the service name."""

    def register(server: grpc.aio.Server) -> str:
        servicer = GroupStreamServicer(metadata, bootstrap, security, limits)
        group_stream_pb2_grpc.add_GroupStreamServiceServicer_to_server(servicer, server)
        return SERVICE_NAME

    return register
