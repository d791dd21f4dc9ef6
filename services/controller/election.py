"""Controller election through etcd, and the controller epoch.

Campaign (one transaction, so winning and bumping the epoch cannot be separated)::

    read /headwater/controller/epoch -> (n, mod_revision)   (absent: n = 0, version 0)
    txn  if   leader key absent  and  epoch key mod_revision == read one (or absent)
         then put leader = {"controller_id", "epoch": n+1, "host", "port"} under my lease
              put epoch  = n+1
         else get leader

The leader key lives under the candidate's lease (TTL ``lease_ttl``); when the process dies
the lease expires, etcd deletes the key, standbys watching it campaign again. The active
controller steps down at once when its lease is lost or its leader key changes hands; even
before it notices, its writes fail because every state write compares the epoch key's value
(see ``state.fenced_write``).

Owned by one task (:meth:`Election.run`); it reports transitions through two callbacks run on
the loop: ``on_elected(epoch)`` and ``on_resigned()``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headwater.platform import etcd as hetcd
from headwater.platform.cluster_layout import EPOCH_KEY, LEADER_KEY

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderInfo:
    controller_id: int
    epoch: int
    host: str
    port: int

    @staticmethod
    def decode(raw: bytes) -> LeaderInfo:
        d = json.loads(raw)
        return LeaderInfo(int(d["controller_id"]), int(d["epoch"]), str(d["host"]), int(d["port"]))

    def encode(self) -> bytes:
        return json.dumps(
            {
                "controller_id": self.controller_id,
                "epoch": self.epoch,
                "host": self.host,
                "port": self.port,
            }
        ).encode()


async def read_leader(etcd: hetcd.Etcd) -> LeaderInfo | None:
    got = await etcd.get(LEADER_KEY)
    return LeaderInfo.decode(got[0]) if got else None


class Election:
    """Campaigns until elected, stays active while the lease lives, then starts over."""

    def __init__(
        self,
        etcd: hetcd.Etcd,
        *,
        controller_id: int,
        host: str,
        port: int,
        on_elected: Callable[[int], None],
        on_resigned: Callable[[], None],
        lease_ttl: int = 5,
    ) -> None:
        self._etcd = etcd
        self.controller_id = controller_id
        self._host = host
        self._port = port
        self._on_elected = on_elected
        self._on_resigned = on_resigned
        self._lease_ttl = lease_ttl
        self._lease: hetcd.LeaseKeeper | None = None
        self.active_epoch: int | None = None
        #: The active controller as last seen (self when active).
        self.leader: LeaderInfo | None = None

    async def run(self) -> None:
        """Forever: campaign, serve while active, resign; retry etcd failures with backoff."""
        backoff = 0.1
        while True:
            try:
                await self._round()
                backoff = 0.1
            except hetcd.EtcdError as exc:
                log.warning("election: etcd error, retrying in %.1fs: %s", backoff, exc)
                self._resign()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _round(self) -> None:
        lease = self._lease
        if lease is None or lease.lost.is_set():
            lease = self._lease = await self._etcd.grant_lease(
                self._lease_ttl, name=f"controller-{self.controller_id}-lease"
            )
        current = await self._etcd.get(EPOCH_KEY)
        epoch = int(current[0]) if current else 0
        epoch_cmp = (
            hetcd.cmp_mod(EPOCH_KEY, "==", current[1].mod_revision)
            if current
            else hetcd.cmp_absent(EPOCH_KEY)
        )
        me = LeaderInfo(self.controller_id, epoch + 1, self._host, self._port)
        result = await self._etcd.txn(
            [hetcd.cmp_absent(LEADER_KEY), epoch_cmp],
            [hetcd.op_put(LEADER_KEY, me.encode(), lease), hetcd.op_put(EPOCH_KEY, str(me.epoch))],
            [hetcd.op_get(LEADER_KEY)],
        )
        if result.succeeded:
            await self._serve_as_active(me, lease, result.revision)
            return
        kvs = result.responses[0] if result.responses else []
        if isinstance(kvs, list) and kvs:
            self.leader = LeaderInfo.decode(kvs[0].value)
            await self._wait_for_vacancy(kvs[0].meta.mod_revision)
        # else: the epoch moved under us, or the leader vanished in between: campaign again

    async def _serve_as_active(
        self, me: LeaderInfo, lease: hetcd.LeaseKeeper, revision: int
    ) -> None:
        log.info("controller %d elected, epoch %d", self.controller_id, me.epoch)
        self.active_epoch = me.epoch
        self.leader = me
        self._on_elected(me.epoch)
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(lease.lost.wait(), name="election-lease-lost")
        ]
        watch: hetcd.Watch | None = None
        try:
            watch = await self._etcd.watch_prefix(LEADER_KEY, start_revision=revision + 1)
            tasks.append(
                asyncio.create_task(self._leader_changed(watch), name="election-leader-watch")
            )
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    log.warning("election: leader watch failed: %s", task.exception())
        finally:
            for task in tasks:
                task.cancel()
            if watch is not None:
                await watch.cancel()
            log.warning("controller %d stepping down (epoch %d)", self.controller_id, me.epoch)
            self._resign()
            # whatever ended the term, give the leader key up now (revoking deletes it) so
            # the next round starts clean; an already lost lease makes this a no-op
            await lease.revoke()
            self._lease = None

    async def _leader_changed(self, watch: hetcd.Watch) -> None:
        async for event in watch:
            if event.key == LEADER_KEY:
                return

    async def _wait_for_vacancy(self, seen_revision: int) -> None:
        """Standby: wait until the leader key is deleted (or rewritten) after ``seen``."""
        watch = await self._etcd.watch_prefix(LEADER_KEY, start_revision=seen_revision + 1)
        try:
            async for event in watch:
                if event.key != LEADER_KEY:
                    continue
                if event.kind == "delete":
                    self.leader = None
                    return
                self.leader = LeaderInfo.decode(event.value)
        finally:
            await watch.cancel()

    def _resign(self) -> None:
        if self.active_epoch is not None:
            self.active_epoch = None
            self._on_resigned()

    async def resign_and_stop(self) -> None:
        """Graceful shutdown: give up leadership now so a standby takes over at once."""
        if self._lease is not None:
            await self._lease.revoke()
            self._lease = None
        self._resign()
