"""An in-memory runtime for the pure coordinator handlers: a fake clock and a list as the log.

Mirrors :mod:`services.coordinator.partition`: park the request, append the records (here: to
a list, stamped with the epoch header), replay them with ``GroupTable.replay``, then deliver
replies to parked requests.
"""

from __future__ import annotations

import itertools
from typing import Any

from headwater.v1 import coordinator_pb2 as pb
from services.coordinator import membership, offsets
from services.coordinator import records as rec
from services.coordinator.group import GroupTable
from services.coordinator.outcome import Ctx, Outcome, WaitKey

PARKED = object()


class Harness:
    def __init__(self, epoch: int = 1) -> None:
        self.table = GroupTable()
        self.log: list[tuple[bytes, bytes | None, int]] = []
        self.now = 1_000_000
        self.epoch = epoch
        self.parked: dict[WaitKey, Any] = {}
        self._ids = itertools.count(1)
        self.rebalances: list[tuple[str, int]] = []
        self.apply(Outcome(records=[rec.marker(epoch, 1)]))

    def ctx(self) -> Ctx:
        return Ctx(
            now_ms=self.now,
            epoch=self.epoch,
            new_member_id=lambda client: f"{client or 'm'}-{next(self._ids)}",
            offsets_retention_ms=60_000,
        )

    def apply(self, out: Outcome) -> Any:
        if out.wait is not None:
            self.parked[out.wait] = PARKED
        for r in out.records:
            self.log.append((r.key, r.value, r.epoch))
            self.table.replay(r.key, r.value, r.epoch, self.now)
        for key, resp in out.replies:
            if self.parked.get(key) is PARKED:
                self.parked[key] = resp
        self.rebalances.extend(out.rebalances)
        if out.wait is not None:
            return self.parked[out.wait]
        return out.response

    def take(self, key: WaitKey) -> Any:
        """The answer to a parked request (PARKED while it still waits)."""
        v = self.parked[key]
        if v is not PARKED:
            del self.parked[key]
        return v

    # ---- requests

    def join(
        self,
        group: str,
        member_id: str = "",
        *,
        instance: str = "",
        topics: tuple[str, ...] = ("t",),
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        client: str = "c",
    ) -> Any:
        sub = pb.ConsumerSubscription(topics=list(topics)).SerializeToString()
        req = pb.JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type="consumer",
            protocols=[pb.JoinGroupProtocol(name="range", metadata=sub)],
            client_id=client,
        )
        return self.apply(membership.join(self.table, req, self.ctx()))

    def join_dynamic(self, group: str, **kw: Any) -> str:
        r = self.join(group, **kw)
        assert r.member_id and r.error_code != 0
        return str(r.member_id)

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        instance: str = "",
    ) -> Any:
        req = pb.SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            assignments=[
                pb.SyncGroupAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
        return self.apply(membership.sync(self.table, req, self.ctx()))

    def heartbeat(self, group: str, member_id: str, generation: int, instance: str = "") -> int:
        req = pb.HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=member_id,
            group_instance_id=instance,
        )  # fmt: skip
        return int(self.apply(membership.heartbeat(self.table, req, self.ctx())).error_code)

    def leave(self, group: str, member_id: str) -> Any:
        req = pb.LeaveGroupRequest(group_id=group, members=[pb.MemberIdentity(member_id=member_id)])
        return self.apply(membership.leave(self.table, req, self.ctx()))

    def commit(
        self,
        group: str,
        member_id: str,
        generation: int,
        parts: dict[tuple[str, int], int],
        instance: str = "",
    ) -> Any:
        req = pb.OffsetCommitRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            partitions=[
                pb.OffsetCommitPartition(topic=t, partition=p, offset=o, leader_epoch=-1)
                for (t, p), o in parts.items()
            ],
        )
        return self.apply(offsets.commit(self.table, req, self.ctx()))

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        resp = offsets.fetch(self.table, pb.OffsetFetchRequest(group_id=group))
        return {(o.topic, o.partition): o.offset for o in resp.offsets}

    def tick(self) -> None:
        parked = {k for k, v in self.parked.items() if v is PARKED}
        self.apply(membership.tick(self.table, self.ctx(), parked))
        self.apply(offsets.expire(self.table, self.ctx()))

    def replayed(self) -> GroupTable:
        """A fresh table built only from the log (what a new owner would load)."""
        t = GroupTable()
        for key, value, epoch in self.log:
            t.replay(key, value, epoch, self.now)
        return t
