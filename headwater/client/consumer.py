"""AsyncConsumer: manual assignment, positions, one Fetch stream per partition.

Usage::

    c = AsyncConsumer("127.0.0.1:9092", auto_offset_reset="earliest")
    c.assign([TopicPartition("events", 0)])
    for fb in await c.poll_batches(timeout_ms=500):   # fast path: whole decoded batches
        fb.values()                                     # or fb.to_arrow()
    records = await c.poll(timeout_ms=500, max_records=500)   # ConsumerRecord objects
    await c.close()

The position of a partition is one integer: the offset of the next record ``poll`` hands out.
It starts unknown and is resolved with ``auto_offset_reset`` (earliest | latest | none ->
:class:`NoOffsetForPartitionError`), or set with ``seek``/``seek_to_beginning``/
``seek_to_end``/a timestamp via ``offsets_for_times``.

Fetching (:mod:`headwater.client.fetcher`): one task per assigned partition holds one
``Broker.Fetch`` server stream at a time, starting at the position, into a bounded buffer
(``max_buffer_bytes``; gRPC flow control then holds the broker back); it restarts the stream
after retriable errors and applies ``auto_offset_reset`` on OFFSET_OUT_OF_RANGE.
Non-retriable errors are raised by the next ``poll``. Decoding (CRC check, decompression)
happens in ``poll`` on whole batches.

Groups: with ``group_id`` set, ``subscribe(topics | pattern=..., listener=...)`` makes the
consumer a group member (:mod:`headwater.client.group`): the assignment comes from the
group, positions start at the committed offsets, ``commit``/``commit_async``/``committed``
talk to the group's coordinator, and auto-commit (``enable_auto_commit``, every
``auto_commit_interval_ms``, from ``poll``) commits the position after the last record
``poll`` returned. ``partition_assignment_strategy`` defaults to ``["range",
"cooperative-sticky"]`` as Kafka 3.x: the group uses range until every member lists
cooperative-sticky first. ``assign`` and ``subscribe`` exclude each other.

Transactions (docs/transactions.md): ``isolation_level`` "read_uncommitted" (default) or
"read_committed". Fetches and ListOffsets carry the level (read_committed: never past the last
stable offset); each response's batches pass :func:`headwater.client.txn_filter.keep_flags`
(control batches are never delivered; read_committed drops aborted transactions' batches);
positions advance past dropped batches. With read_committed, ``committed()`` asks for stable
offsets and retries UNSTABLE_OFFSET_COMMIT until the request timeout.

Ownership: everything runs on one event loop; the fetch task of a partition is the only
writer of its ``pending`` list, ``poll`` the only reader; positions are changed only by
``poll``, the seek methods (callers on the loop) and an offset reset in the fetch task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from headwater import errors, timeouts
from headwater.client.connection import ConnectionPool, parse_bootstrap
from headwater.client.coordinator_client import CoordinatorClient
from headwater.client.errors import (
    ConsumerClosedError,
    IllegalStateError,
    NoOffsetForPartitionError,
)
from headwater.client.fetched import FetchedBatch, records_of
from headwater.client.fetcher import FetchConfig, Fetcher, PartitionState
from headwater.client.group import GroupConfig, GroupMember, RebalanceListener
from headwater.client.metadata import Metadata
from headwater.client.offsets import EARLIEST, LATEST, list_offsets
from headwater.client.security import ClientSecurity
from headwater.client.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from headwater.v1 import broker_pb2, coordinator_pb2

log = logging.getLogger(__name__)


class AsyncConsumer:
    """See the module docstring."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        auto_offset_reset: str = "latest",
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        max_partition_fetch_bytes: int = 1024 * 1024,
        max_buffer_bytes: int = 8 * 1024 * 1024,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        check_crcs: bool = True,
        client_id: str = "headwater-python",
        metadata_max_age_ms: int = 300_000,
        group_id: str | None = None,
        session_timeout_ms: int = 45_000,
        max_poll_interval_ms: int = 300_000,
        heartbeat_interval_ms: int = 3_000,
        group_instance_id: str | None = None,
        partition_assignment_strategy: Sequence[str] = ("range", "cooperative-sticky"),
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        isolation_level: str = "read_uncommitted",
        address_resolver: Callable[[str], str] | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self._address_resolver = address_resolver
        self._security = security  # TLS / credentials (headwater.client.security)
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise errors.InvalidConfigError(
                "isolation_level must be read_uncommitted or read_committed, "
                f"not {isolation_level!r}"
            )
        self.isolation_level = isolation_level
        self.read_committed = isolation_level == "read_committed"
        self._isolation = (
            broker_pb2.READ_COMMITTED if self.read_committed else broker_pb2.READ_UNCOMMITTED
        )
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise errors.InvalidConfigError(
                f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}"
            )
        if max_partition_fetch_bytes <= 0 or max_buffer_bytes <= 0 or fetch_max_wait_ms < 0:
            raise errors.InvalidConfigError("fetch sizes must be > 0 and fetch_max_wait_ms >= 0")
        self._bootstrap = parse_bootstrap(
            bootstrap if isinstance(bootstrap, str) else list(bootstrap)
        )
        self.auto_offset_reset = auto_offset_reset
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_buffer_bytes = max_buffer_bytes
        self.timeout_s = request_timeout_ms / 1000
        self.backoff_s = retry_backoff_ms / 1000
        self.check_crcs = check_crcs
        self.client_id = client_id
        self._metadata_max_age_ms = metadata_max_age_ms
        self._pool: ConnectionPool | None = None
        self._metadata: Metadata | None = None
        self._parts: dict[TopicPartition, PartitionState] = {}
        self._wake: asyncio.Event | None = None
        self._fetcher: Fetcher | None = None
        self._fetch_cfg = FetchConfig(
            auto_offset_reset=auto_offset_reset,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=fetch_min_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            max_buffer_bytes=max_buffer_bytes,
            timeout_s=self.timeout_s,
            backoff_s=self.backoff_s,
            check_crcs=check_crcs,
            client_id=client_id,
            isolation=self._isolation,
            read_committed=self.read_committed,
        )
        self._closed = False
        self._group_cfg: GroupConfig | None = None
        if group_id is not None:
            self._group_cfg = GroupConfig(
                group_id=group_id,
                session_timeout_ms=session_timeout_ms,
                max_poll_interval_ms=max_poll_interval_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                group_instance_id=group_instance_id or "",
                partition_assignment_strategy=tuple(partition_assignment_strategy),
                enable_auto_commit=enable_auto_commit,
                auto_commit_interval_ms=auto_commit_interval_ms,
            )
            self._group_cfg.validate()
        self._group: GroupMember | None = None

    # ------------------------------------------------------------ plumbing

    def _ensure_started(self) -> tuple[ConnectionPool, Metadata]:
        if self._closed:
            raise ConsumerClosedError("consumer is closed")
        if self._pool is None or self._metadata is None:
            self._pool = ConnectionPool(
                address_resolver=self._address_resolver, security=self._security
            )
            self._metadata = Metadata(
                self._pool,
                self._bootstrap,
                max_age_ms=self._metadata_max_age_ms,
                request_timeout_ms=int(self.timeout_s * 1000),
                retry_backoff_ms=int(self.backoff_s * 1000),
            )
            self._wake = asyncio.Event()
            self._fetcher = Fetcher(
                self._pool, self._metadata, self._wake, self._parts, self._fetch_cfg
            )
        return self._pool, self._metadata

    def _part(self, tp: TopicPartition) -> PartitionState:
        st = self._parts.get(tp)
        if st is None:
            raise IllegalStateError(f"{tp.topic}[{tp.partition}] is not assigned")
        return st

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ assignment and positions

    # ------------------------------------------------------------ groups

    def _group_member(self) -> GroupMember:
        pool, md = self._ensure_started()
        if self._group is None:
            if self._group_cfg is None:
                raise errors.InvalidGroupIdError("this consumer has no group_id")
            coord = CoordinatorClient(pool, md, timeout_s=self.timeout_s, backoff_s=self.backoff_s)
            self._group = GroupMember(self, coord, self._group_cfg)
        return self._group

    def subscribe(
        self,
        topics: Iterable[str] = (),
        *,
        pattern: str | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        """Join the group (at the next poll) for ``topics`` or topics matching ``pattern``."""
        names = [topics] if isinstance(topics, str) else list(topics)
        if (pattern is None) == (not names):
            raise IllegalStateError("subscribe to a list of topics or to a pattern, not both")
        if self._parts and self._group is None:
            raise IllegalStateError("subscribe() after assign(): call assign([]) first")
        self._group_member().subscribe(names, pattern, listener)

    def subscription(self) -> set[str]:
        return set() if self._group is None else set(self._group.topics)

    @property
    def generation(self) -> int:
        """The group generation of the current assignment (-1 outside a group)."""
        return -1 if self._group is None else self._group.generation

    @property
    def member_id(self) -> str:
        return "" if self._group is None else self._group.member_id

    def _group_assign(self, partitions: set[TopicPartition]) -> None:
        """The membership code's way to set the assignment (see :mod:`.group`)."""
        for tp in list(self._parts):
            if tp not in partitions:
                self._parts.pop(tp).stop()
        for tp in sorted(partitions):
            if tp not in self._parts:
                self._parts[tp] = PartitionState(tp)
        if self._wake is not None:
            self._wake.set()

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (next offset to read) or, by default, the position of every
        assigned partition; carries the generation and member id (stale ones are rejected)."""
        await self._group_member().commit(offsets)

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None) -> asyncio.Task[None]:
        """Like :meth:`commit` in a task; the task's exception reports a failure."""
        return asyncio.get_running_loop().create_task(self.commit(offsets), name="commit-async")

    async def commit_detailed(
        self, offsets: Mapping[TopicPartition, tuple[int, str]]
    ) -> coordinator_pb2.OffsetCommitResponse:
        """One OffsetCommit of ``tp -> (offset, metadata)`` with the current generation and
        member; the coordinator's response is returned with its error codes, not raised
        (the group stream reports them per partition)."""
        return await self._group_member().commit_response(offsets)

    @property
    def rebalancing(self) -> bool:
        """True while a group member is not in a stable generation (joining, syncing, lost)."""
        return self._group is not None and not self._group.stable

    async def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed)."""
        return await self._group_member().fetch_committed(tps)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; kept partitions keep their position and buffers."""
        self._ensure_started()
        if self._group is not None and self._group.topics:
            raise IllegalStateError("assign() on a subscribed consumer")
        wanted = [TopicPartition(*tp) for tp in partitions]
        if len(set(wanted)) != len(wanted):
            raise IllegalStateError("duplicate partitions in assignment")
        for tp in list(self._parts):
            if tp not in wanted:
                self._parts.pop(tp).stop()
        for tp in wanted:
            if tp not in self._parts:
                self._parts[tp] = PartitionState(tp)

    def assignment(self) -> set[TopicPartition]:
        return set(self._parts)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The next poll returns records of ``tp`` from ``offset``."""
        if offset < 0:
            raise errors.OffsetOutOfRangeError(f"cannot seek to negative offset {offset}")
        st = self._part(TopicPartition(*tp))
        st.stop()
        st.position = offset

    async def _seek_to(self, spec: int, tps: Sequence[TopicPartition]) -> None:
        pool, md = self._ensure_started()
        targets = [TopicPartition(*tp) for tp in tps] or list(self._parts)
        for tp in targets:
            self._part(tp)
        found = await list_offsets(
            pool,
            md,
            dict.fromkeys(targets, spec),
            timeout_s=self.timeout_s,
            isolation_level=self._isolation,
        )
        for tp in targets:
            self.seek(tp, found[tp].offset)

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        """Seek the given (default: all assigned) partitions to their log start offset."""
        await self._seek_to(EARLIEST, tps)

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        """Seek the given (default: all assigned) partitions to their end (high watermark)."""
        await self._seek_to(LATEST, tps)

    async def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """First offset with timestamp >= the given ms per partition (None if none)."""
        pool, md = self._ensure_started()
        for ts in timestamps.values():
            if ts < 0:
                raise errors.InvalidTimestampError(f"timestamp must be >= 0, got {ts}")
        found = await list_offsets(
            pool, md, dict(timestamps), timeout_s=self.timeout_s, isolation_level=self._isolation
        )
        return {tp: (None if o.offset < 0 else o) for tp, o in found.items()}

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        pool, md = self._ensure_started()
        found = await list_offsets(
            pool,
            md,
            dict.fromkeys(tps, EARLIEST),
            timeout_s=self.timeout_s,
            isolation_level=self._isolation,
        )
        return {tp: o.offset for tp, o in found.items()}

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        pool, md = self._ensure_started()
        found = await list_offsets(
            pool,
            md,
            dict.fromkeys(tps, LATEST),
            timeout_s=self.timeout_s,
            isolation_level=self._isolation,
        )
        return {tp: o.offset for tp, o in found.items()}

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``tp`` (resolved if unknown)."""
        st = self._part(TopicPartition(*tp))
        if st.position is None:
            await self._resolve_positions([st])
        assert st.position is not None
        return st.position

    def highwater(self, tp: TopicPartition) -> int:
        """The last high watermark seen for ``tp`` (-1 before the first fetch response)."""
        return self._part(TopicPartition(*tp)).high_watermark

    async def _resolve_positions(self, parts: list[PartitionState]) -> None:
        if not parts:
            return
        if self.auto_offset_reset == "none":
            st = parts[0]
            raise NoOffsetForPartitionError(
                f"no position for {st.tp.topic}[{st.tp.partition}] and auto_offset_reset=none"
            )
        spec = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
        pool, md = self._ensure_started()
        found = await list_offsets(
            pool,
            md,
            {st.tp: spec for st in parts},
            timeout_s=self.timeout_s,
            isolation_level=self._isolation,
        )
        for st in parts:
            if st.position is None:
                st.position = found[st.tp].offset

    async def poll_batches(
        self, timeout_ms: float = 500, max_records: int | None = None
    ) -> list[FetchedBatch]:
        """Whole decoded batches (sliced to the position) fetched so far, waiting up to
        ``timeout_ms`` for the first; raises a partition's non-retriable fetch error.
        ``max_records``: None (no limit), 0 (take nothing: the call still serves the group
        protocol for ``timeout_ms``, as the group stream does with no credit left) or more;
        negative: InvalidRequestError."""
        if max_records is not None and max_records < 0:
            raise errors.InvalidRequestError("max_records must be >= 0")
        self._ensure_started()
        # A group member takes part in the group protocol only when subscribed; with
        # ``assign`` the group id serves commits and committed offsets alone (generation -1,
        # as Kafka's consumer), and joining would replace the manual assignment.
        group = self._group if self._group is not None and self._group.subscribed else None
        if not self._parts and group is None:
            raise IllegalStateError("no partitions assigned")
        deadline = time.monotonic() + timeout_ms / 1000
        assert self._wake is not None
        while True:
            self._wake.clear()
            if group is not None:
                await group.ensure_active(deadline - time.monotonic())
            await self._resolve_positions(
                [st for st in self._parts.values() if st.position is None]
            )
            fetcher = self._fetcher
            assert fetcher is not None
            fetcher.ensure_fetching()
            out = fetcher.collect(max_records)
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            with contextlib.suppress(TimeoutError):
                await timeouts.wait_for(self._wake.wait(), remaining)

    async def poll(self, timeout_ms: float = 500, max_records: int = 500) -> list[ConsumerRecord]:
        """Up to ``max_records`` (> 0, else InvalidRequestError) records as
        :class:`ConsumerRecord` (the convenience path)."""
        check_max_records(max_records)
        return records_of(await self.poll_batches(timeout_ms, max_records))

    async def close(self, *, leave_group: bool = False) -> None:
        """Close: a group member commits (auto-commit), revokes and leaves; a static member
        (``group_instance_id``) leaves only with ``leave_group`` (else it keeps its place for
        the session timeout, as Kafka's)."""
        if self._closed:
            return
        if self._group is not None:
            try:
                await self._group.close(leave_static=leave_group)
            except errors.HeadwaterError as exc:
                log.warning("leaving the group on close failed: %s", exc)
        self._closed = True
        tasks = [st.task for st in self._parts.values() if st.task is not None]
        for st in self._parts.values():
            st.stop()
        if tasks:
            await asyncio.wait(tasks)
        if self._metadata is not None:
            await self._metadata.close()
        if self._pool is not None:
            await self._pool.close()


def check_max_records(max_records: int) -> None:
    """``poll``'s limit: at least one record (``poll_batches`` also takes 0)."""
    if max_records <= 0:
        raise errors.InvalidRequestError("max_records must be > 0")
