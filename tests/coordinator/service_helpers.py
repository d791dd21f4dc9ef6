"""Raw-gRPC helpers for tests against real coordinator processes (one LocalCluster).

``Committer`` is the commit workload of the coordinator kill tests: a thread committing rising
offsets round-robin over K groups, rediscovering a group's owner after NOT_COORDINATOR or a
transport error, recording what was sent and what was acknowledged (before and after a kill).
"""

from __future__ import annotations

import asyncio
import threading

import grpc

from headwater.client import AsyncAdminClient, NewTopic
from headwater.dev.cluster import LocalCluster
from headwater.v1 import coordinator_pb2 as pb
from headwater.v1 import coordinator_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from tests.helpers.wait import async_wait_for, wait_for

Stub = coordinator_pb2_grpc.GroupCoordinatorStub


def stub(address: str) -> Stub:
    return Stub(grpc.insecure_channel(address))


def find(c: LocalCluster, group: str, via: str | None = None) -> pb.FindCoordinatorResponse | None:
    """FindCoordinator's answer once it names a live owner (None before)."""
    for address in [via] if via else c.coordinator_addresses:
        try:
            r = stub(address).FindCoordinator(pb.FindCoordinatorRequest(group_id=group), timeout=5)
        except grpc.RpcError:
            return None
        if r.error_code == ErrorCode.NONE:
            return r
    return None


def owner(c: LocalCluster, group: str) -> Stub:
    r = wait_for(lambda: find(c, group), timeout=30, what=f"an owner for {group}")
    return stub(f"{r.coordinator.host}:{r.coordinator.port}")


def create_topics(c: LocalCluster, *names: str, partitions: int = 1) -> None:
    """Create topics (commits are refused for partitions that do not exist) and wait until
    the broker's metadata names them."""

    async def run() -> None:
        admin = AsyncAdminClient(c.bootstrap)
        try:
            await admin.create_topics([NewTopic(n, partitions, 1) for n in names])

            async def known() -> bool:
                return set(names) <= set(await admin.list_topics())

            await async_wait_for(known, timeout=30, what=f"topics {names} in metadata")
        finally:
            await admin.close()

    asyncio.run(run())


def commit(
    s: Stub, group: str, offset: int, *, generation: int = -1, member: str = "", metadata: str = ""
) -> pb.OffsetCommitResponse:
    part = pb.OffsetCommitPartition(topic="t", partition=0, offset=offset, metadata=metadata)
    req = pb.OffsetCommitRequest(
        group_id=group, generation_id=generation, member_id=member, partitions=[part]
    )
    return s.OffsetCommit(req, timeout=20)


def fetched(s: Stub, group: str) -> pb.OffsetFetchResponse:
    return s.OffsetFetch(pb.OffsetFetchRequest(group_id=group), timeout=20)


class Committer:
    """The commit workload (see the module doc). ``acked[g]`` / ``sent[g]``: the last offset
    acknowledged / sent for group ``g`` (a commit that failed in transit may still have
    landed); ``acks_after_kill``: groups with an acknowledgement after ``after_kill`` was set."""

    def __init__(self, cluster: LocalCluster, keys: list[str], metadata: str = "") -> None:
        self.cluster = cluster
        self.keys = keys
        self.metadata = metadata
        self.acked: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self.acks_after_kill: set[str] = set()
        self.after_kill = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="committer", daemon=True)

    def _run(self) -> None:
        stubs: dict[str, Stub] = {}
        offset = 0
        while not self._stop.is_set():
            offset += 1
            for g in self.keys:
                try:
                    s = stubs.get(g) or owner(self.cluster, g)
                    stubs[g] = s
                    self.sent[g] = offset
                    r = commit(s, g, offset, metadata=self.metadata)
                except (grpc.RpcError, AssertionError):
                    stubs.pop(g, None)
                    continue
                if r.error_code == ErrorCode.NONE:
                    self.acked[g] = offset
                    if self.after_kill.is_set():
                        self.acks_after_kill.add(g)
                else:
                    stubs.pop(g, None)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive()

    def mismatches(self) -> list[tuple[str, dict[tuple[str, int], int], int, int]]:
        """Groups whose fetched offset is not between the last acknowledged and last sent."""
        out = []
        for g in self.keys:
            got = fetched(owner(self.cluster, g), g)
            values = {(o.topic, o.partition): o.offset for o in got.offsets}
            if got.error_code != ErrorCode.NONE or not (
                self.acked[g] <= values.get(("t", 0), -1) <= self.sent[g]
            ):
                out.append((g, values, self.acked[g], self.sent[g]))
        return out
