"""Consumer-group administration, mixed into :class:`headwater.client.admin.AsyncAdminClient`.

Group requests go to the group's coordinator (:class:`CoordinatorClient`: found through any
broker's metadata, then FindCoordinator). ``list_groups`` asks every live coordinator (each
lists the groups it owns) and merges. ``alter_consumer_group_offsets`` commits with
generation -1 and no member id: the coordinator accepts it only while the group has no
members (NON_EMPTY_GROUP / a clear message otherwise) — it is how offsets are reset.
Lag comes from the coordinator's DescribeGroups (it measures the high watermarks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from headwater import errors
from headwater.client.connection import ConnectionPool
from headwater.client.coordinator_client import CoordinatorClient
from headwater.client.metadata import Metadata
from headwater.client.types import TopicPartition
from headwater.v1 import coordinator_pb2 as cpb


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    state: str
    protocol_type: str


@dataclass(frozen=True)
class GroupMemberDescription:
    member_id: str
    group_instance_id: str
    client_id: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int  # -1: nothing committed
    end: int
    lag: int
    member_id: str


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation_id: int
    leader: str
    members: tuple[GroupMemberDescription, ...]
    partitions: tuple[PartitionLag, ...]
    total_lag: int

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group_id,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "generation_id": self.generation_id,
            "leader": self.leader,
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.group_instance_id or None,
                    "client_id": m.client_id,
                    "assignment": [
                        {"topic": tp.topic, "partition": tp.partition} for tp in m.assignment
                    ],
                }
                for m in self.members
            ],
            "partitions": [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "committed": p.committed,
                    "end": p.end,
                    "lag": p.lag,
                    "member_id": p.member_id or None,
                }
                for p in self.partitions
            ],
            "total_lag": self.total_lag,
        }


def _describe(g: cpb.DescribedGroup) -> GroupDescription:
    return GroupDescription(
        group_id=g.group_id,
        state=g.state,
        protocol_type=g.protocol_type,
        protocol=g.protocol_name,
        generation_id=g.generation_id,
        leader=g.leader,
        members=tuple(
            GroupMemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                tuple(TopicPartition(t.topic, p) for t in m.assignment for p in t.partitions),
            )
            for m in g.members
        ),
        partitions=tuple(
            PartitionLag(p.topic, p.partition, p.committed, p.end, p.lag, p.member_id)
            for p in sorted(g.partitions, key=lambda p: (p.topic, p.partition))
        ),
        total_lag=g.total_lag,
    )


class GroupAdminMixin:
    """Group operations; the host class provides ``_pool``, ``_metadata``, ``timeout_s``."""

    _pool: ConnectionPool
    _metadata: Metadata
    timeout_s: float
    _coordinators: CoordinatorClient | None = None

    def _coord(self) -> CoordinatorClient:
        if self._coordinators is None:
            self._coordinators = CoordinatorClient(
                self._pool, self._metadata, timeout_s=self.timeout_s, backoff_s=0.1
            )
        return self._coordinators

    async def list_groups(self, states: Iterable[str] = ()) -> list[ListedGroup]:
        """Every group known to any live coordinator (optionally only in ``states``)."""
        view = await self._metadata.refresh()
        if not view.coordinators:
            raise errors.CoordinatorNotAvailableError("no group coordinator is registered")
        req = cpb.ListGroupsRequest(states=list(states))

        async def one(address: str) -> cpb.ListGroupsResponse:
            return await self._pool.coordinator(address).ListGroups(req, timeout=self.timeout_s)

        results = await asyncio.gather(*(one(a) for a in view.coordinators), return_exceptions=True)
        found: dict[str, ListedGroup] = {}
        answered = 0
        last: BaseException | None = None
        for r in results:
            if isinstance(r, grpc.RpcError):
                last = errors.from_rpc_error(r)
                continue
            if isinstance(r, BaseException):
                raise r
            if r.error_code:
                last = errors.error_for_code(r.error_code)
                continue
            answered += 1
            for g in r.groups:
                found[g.group_id] = ListedGroup(g.group_id, g.state, g.protocol_type)
        if not answered and last is not None:
            raise last
        return [found[k] for k in sorted(found)]

    async def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """Members, assignments and per-partition lag; raises a group's error code."""
        out = []
        for gid in group_ids:
            resp = await self._coord().call(
                gid, "DescribeGroups", cpb.DescribeGroupsRequest(group_ids=[gid])
            )
            for g in resp.groups:
                if g.group_id != gid:
                    continue
                errors.raise_for_code(g.error_code, f"group {gid!r}")
                out.append(_describe(g))
                break
            else:
                raise errors.GroupIdNotFoundError(f"group {gid!r} was not described")
        return out

    async def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete empty groups (and their offsets); raises the first group's error."""
        for gid in group_ids:
            resp = await self._coord().call(
                gid, "DeleteGroups", cpb.DeleteGroupsRequest(group_ids=[gid])
            )
            for r in resp.results:
                if r.group_id == gid:
                    errors.raise_for_code(r.error_code, r.error_message or f"group {gid!r}")

    async def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Committed offsets of the group (all committed partitions by default)."""
        by_topic: dict[str, list[int]] = {}
        for tp in partitions or ():
            by_topic.setdefault(tp[0], []).append(tp[1])
        req = cpb.OffsetFetchRequest(
            group_id=group_id,
            partitions=[cpb.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()],
        )
        resp = await self._coord().call(group_id, "OffsetFetch", req)
        errors.raise_for_code(resp.error_code, resp.error_message)
        return {
            TopicPartition(o.topic, o.partition): o.offset
            for o in resp.offsets
            if o.offset >= 0 and not o.error_code
        }

    async def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        """Set committed offsets of a group with no active members (NON_EMPTY_GROUP or the
        coordinator's error otherwise; nothing changes then)."""
        for tp, off in offsets.items():
            if off < 0:
                raise errors.InvalidRequestError(f"offset for {tp[0]}[{tp[1]}] must be >= 0")
        req = cpb.OffsetCommitRequest(
            group_id=group_id,
            generation_id=-1,
            member_id="",
            partitions=[
                cpb.OffsetCommitPartition(topic=tp[0], partition=tp[1], offset=o, leader_epoch=-1)
                for tp, o in sorted(offsets.items())
            ],
        )
        resp = await self._coord().call(group_id, "OffsetCommit", req)
        errors.raise_for_code(resp.error_code, resp.error_message)
        for p in resp.partitions:
            errors.raise_for_code(p.error_code, p.error_message or f"{p.topic}[{p.partition}]")
