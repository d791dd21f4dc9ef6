"""Cluster metadata on the client: bootstrap, the Metadata RPC, a cache, leader lookup.

:class:`Metadata` is owned by one client on one event loop. ``view`` is an immutable
:class:`ClusterView` snapshot replaced whole by each refresh, so readers never see a
half-updated cache. Refreshes are single-flight: concurrent callers await the same RPC.
A refresh asks any known broker (bootstrap addresses first time, then the advertised brokers
and the bootstrap list as a fallback) for all topics.

The cache is refreshed when a caller reports stale data (``request_update``, after an
``invalid_metadata`` error such as NOT_LEADER_OR_FOLLOWER) and when it is older than
``max_age_ms`` (``maybe_refresh``). Background refreshes start at least ``retry_backoff_ms``
apart (Kafka's ``retry.backoff.ms`` between metadata attempts), counted from the start of the
previous one, not added after it: the first report after a quiet spell refreshes at once, and
a report that comes while a refresh is in flight (whose answer may predate what the caller
saw) gets one more refresh when that backoff has passed, so a client that keeps failing on a
dead leader sees the controller's new leaders within one backoff of their reaching a broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from headwater import errors
from headwater.client.connection import ConnectionPool
from headwater.client.types import TopicPartition
from headwater.v1 import metadata_pb2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str
    partitions: dict[int, metadata_pb2.PartitionState]
    configs: dict[str, str]


@dataclass(frozen=True)
class ClusterView:
    """One Metadata answer: brokers by id, topics by name (only those without error)."""

    brokers: dict[int, metadata_pb2.BrokerInfo] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str = ""
    controller_address: str | None = None
    coordinators: tuple[str, ...] = ()  # live group coordinators, "host:port"

    def address(self, broker_id: int) -> str | None:
        b = self.brokers.get(broker_id)
        return None if b is None else f"{b.host}:{b.port}"

    def partition_count(self, topic: str) -> int | None:
        t = self.topics.get(topic)
        return None if t is None else len(t.partitions)

    def leader(self, tp: TopicPartition) -> int:
        """Leader broker id of ``tp``; -1 when unknown or leaderless."""
        t = self.topics.get(tp.topic)
        if t is None:
            return -1
        st = t.partitions.get(tp.partition)
        if st is None or st.leader < 0 or st.leader not in self.brokers:
            return -1
        return int(st.leader)

    def replicated(self, tp: TopicPartition) -> bool:
        """``tp`` has replicas besides its leader (followers that fetch what it appends);
        False when it has one replica or is unknown."""
        t = self.topics.get(tp.topic)
        st = None if t is None else t.partitions.get(tp.partition)
        return st is not None and len(st.replicas) > 1

    def leader_address(self, tp: TopicPartition) -> str | None:
        leader = self.leader(tp)
        return None if leader < 0 else self.address(leader)


def view_from_response(resp: metadata_pb2.MetadataResponse) -> ClusterView:
    topics = {
        t.name: TopicInfo(
            t.name, t.topic_id, {p.partition: p for p in t.partitions}, dict(t.configs)
        )
        for t in resp.topics
        if t.error_code == 0
    }
    controller_address = None
    if resp.HasField("controller") and resp.controller.host:
        controller_address = f"{resp.controller.host}:{resp.controller.port}"
    return ClusterView(
        brokers={b.broker_id: b for b in resp.brokers},
        topics=topics,
        controller_id=resp.controller_id,
        cluster_id=resp.cluster_id,
        controller_address=controller_address,
        coordinators=tuple(f"{c.host}:{c.port}" for c in resp.coordinators if c.host),
    )


class Metadata:
    """The metadata cache of one client (see module docstring)."""

    def __init__(
        self,
        pool: ConnectionPool,
        bootstrap: list[str],
        *,
        max_age_ms: int = 300_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._bootstrap = list(bootstrap)
        self._max_age = max_age_ms / 1000
        self._timeout = request_timeout_ms / 1000
        self._backoff = retry_backoff_ms / 1000
        self._clock = clock
        self.view = ClusterView()
        self.updated_at = float("-inf")
        self._inflight: asyncio.Task[ClusterView] | None = None
        self._listeners: list[Callable[[ClusterView], None]] = []
        self._background: asyncio.Task[None] | None = None
        #: when the last Metadata request started (background refreshes keep their backoff
        #: from it), and whether an update was asked for while one was in flight
        self._attempted_at = float("-inf")
        self._again = False

    def add_listener(self, fn: Callable[[ClusterView], None]) -> None:
        """``fn(view)`` is called on the loop after every successful refresh."""
        self._listeners.append(fn)

    def _candidates(self) -> list[str]:
        advertised = [f"{b.host}:{b.port}" for b in self.view.brokers.values()]
        random.shuffle(advertised)
        seen: set[str] = set()
        out = []
        for a in [*advertised, *self._bootstrap]:
            if a not in seen:
                seen.add(a)
                out.append(a)
        return out

    async def _fetch(self) -> ClusterView:
        self._attempted_at = self._clock()
        last: errors.HeadwaterError | None = None
        for address in self._candidates():
            try:
                resp = await self._pool.broker(address).Metadata(
                    metadata_pb2.MetadataRequest(), timeout=self._timeout
                )
            except grpc.RpcError as exc:
                last = errors.from_rpc_error(exc)
                log.debug("metadata from %s failed: %s", address, last)
                continue
            view = view_from_response(resp)
            self.view = view
            self.updated_at = self._clock()
            for fn in list(self._listeners):
                fn(view)
            return view
        raise last or errors.NetworkError("no broker answered Metadata")

    async def refresh(self) -> ClusterView:
        """Fetch fresh metadata (joining a refresh already in flight)."""
        task = self._inflight
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._fetch(), name="metadata-refresh")
            self._inflight = task
        return await asyncio.shield(task)

    def request_update(self) -> None:
        """Refresh in the background once ``retry_backoff_ms`` has passed since the last
        attempt started (at once after a quiet spell); asked while a background refresh is
        under way, one more follows it (module doc). Never raises."""
        if self._background is not None and not self._background.done():
            self._again = True
            return
        self._background = asyncio.get_running_loop().create_task(
            self._refresh_later(), name="metadata-background"
        )

    async def _refresh_later(self) -> None:
        while True:
            wait = self._attempted_at + self._backoff - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            self._again = False  # what was asked until now, this refresh answers
            try:
                await self.refresh()
            except errors.HeadwaterError as exc:
                log.warning("metadata refresh failed: %s", exc)
            if not self._again:
                return

    def is_stale(self) -> bool:
        return self._clock() - self.updated_at > self._max_age

    def maybe_refresh(self) -> None:
        if self.is_stale():
            self.request_update()

    async def wait_for_topic(self, topic: str, timeout_s: float) -> TopicInfo:
        """The topic's metadata, refreshing until it is known or ``timeout_s`` has passed."""
        deadline = self._clock() + timeout_s
        info = self.view.topics.get(topic)
        if info is not None and not self.is_stale():
            return info
        while True:
            try:
                view = await self.refresh()
            except errors.HeadwaterError:
                if self._clock() >= deadline:
                    raise
                view = self.view
            info = view.topics.get(topic)
            if info is not None:
                return info
            await self._raise_if_denied(topic)
            if self._clock() >= deadline:
                raise errors.UnknownTopicOrPartitionError(
                    f"topic {topic!r} not found in metadata after {timeout_s:.1f}s"
                )
            await asyncio.sleep(min(self._backoff, max(0.0, deadline - self._clock())))

    async def _raise_if_denied(self, topic: str) -> None:
        """Ask for ``topic`` by name: an all-topics answer silently leaves out the topics the
        caller may not DESCRIBE (authorizer on), a named one says TOPIC_AUTHORIZATION_FAILED,
        raised here as TopicAuthorizationFailedError. Other answers (and failures) are left to
        the caller's retry loop."""
        for address in self._candidates()[:1]:
            try:
                resp = await self._pool.broker(address).Metadata(
                    metadata_pb2.MetadataRequest(topics=[topic]), timeout=self._timeout
                )
            except grpc.RpcError:
                return
            for t in resp.topics:
                if t.name == topic and t.error_code == errors.TopicAuthorizationFailedError.code:
                    raise errors.TopicAuthorizationFailedError(
                        f"not authorized to describe topic {topic!r}"
                    )

    async def close(self) -> None:
        for task in (self._background, self._inflight):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, errors.HeadwaterError):
                    await task
