"""Offset commits only for partitions that exist (Kafka's UNKNOWN_TOPIC_OR_PARTITION).

OffsetCommit and TxnOffsetCommit partitions are checked against the cluster's topics before
they reach the group's runtime: a partition whose topic does not exist, or whose number is not
below the topic's partition count, is answered UNKNOWN_TOPIC_OR_PARTITION in its own result and
nothing is written for it; the others are committed as before (one response, results in the
request's order).

:class:`KnownPartitions` keeps topic -> partition count from broker Metadata (the coordinator's
:class:`~headwater.client.AsyncAdminClient`). On a miss it refreshes once — a Metadata read
*started after the request arrived*, shared by the requests waiting at the same time — before
refusing, so a topic created just before the commit is not refused (once the brokers know it).
A client sending unknown partitions therefore costs at most one Metadata read per request.
When the metadata cannot be read and has never been read, nothing is refused (the commit path
keeps working while brokers are unreachable); afterwards the last view is used.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from headwater import errors
from headwater.client import AsyncAdminClient
from headwater.v1 import coordinator_pb2 as pb
from headwater.v1.errors_pb2 import ErrorCode

log = logging.getLogger(__name__)

Req = TypeVar("Req", pb.OffsetCommitRequest, pb.TxnOffsetCommitRequest)


class KnownPartitions:
    """Topic partition counts as last read from broker Metadata (see module docstring)."""

    def __init__(self, admin: AsyncAdminClient, clock: Callable[[], float] = time.monotonic):
        self._admin = admin
        self._clock = clock
        self.counts: dict[str, int] | None = None  # None: never read
        self._read_started = float("-inf")  # start time of the read ``counts`` came from
        self._lock = asyncio.Lock()

    def _missing(self, tps: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        counts = self.counts or {}
        return {(t, p) for t, p in tps if not 0 <= p < counts.get(t, 0)}

    async def _refresh(self, since: float) -> None:
        """Make ``counts`` come from a Metadata read started at or after ``since``."""
        async with self._lock:
            if self._read_started >= since:
                return  # another request's read, started after ours arrived, is enough
            started = self._clock()
            try:
                view = await self._admin.metadata()
            except (TimeoutError, errors.HeadwaterError) as exc:
                log.debug("offset commit: topic metadata unavailable: %s", exc)
                return
            self.counts = {name: len(t.partitions) for name, t in view.topics.items()}
            self._read_started = started

    async def unknown(self, tps: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        """The partitions of ``tps`` that do not exist (empty when metadata was never read)."""
        arrived = self._clock()
        wanted = list(tps)
        if self.counts is not None and not self._missing(wanted):
            return set()
        await self._refresh(arrived)
        if self.counts is None:
            return set()
        return self._missing(wanted)


def split(request: Req, unknown: set[tuple[str, int]]) -> Req:
    """A copy of the commit request without the ``unknown`` partitions."""
    known = type(request)()
    known.CopyFrom(request)
    del known.partitions[:]
    known.partitions.extend(p for p in request.partitions if (p.topic, p.partition) not in unknown)
    return known


def merge(
    request: pb.OffsetCommitRequest | pb.TxnOffsetCommitRequest,
    resp: pb.OffsetCommitResponse,
    unknown: set[tuple[str, int]],
) -> pb.OffsetCommitResponse:
    """The known partitions' response plus UNKNOWN_TOPIC_OR_PARTITION for the others, in the
    request's order (a whole-request error of ``resp`` is kept)."""
    got: dict[tuple[str, int], list[pb.OffsetCommitPartitionResult]] = {}
    for r in resp.partitions:
        got.setdefault((r.topic, r.partition), []).append(r)
    out = pb.OffsetCommitResponse(error_code=resp.error_code, error_message=resp.error_message)
    for p in request.partitions:
        key = (p.topic, p.partition)
        if key in unknown:
            out.partitions.append(
                pb.OffsetCommitPartitionResult(
                    topic=p.topic,
                    partition=p.partition,
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"{p.topic}[{p.partition}] does not exist",
                )
            )
        elif got.get(key):
            out.partitions.append(got[key].pop(0))
    for rest in got.values():  # anything the runtime answered beyond the request
        out.partitions.extend(rest)
    return out
