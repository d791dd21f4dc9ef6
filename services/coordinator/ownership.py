"""Coordinator registration and offsets-topic partition ownership through etcd.

etcd layout::

    /headwater/coordinators/ids/<id>      {"coordinator_id", "host", "port", "metrics_url"}
                                          under this process's lease (ttl ``lease_ttl``)
    /headwater/coordinators/owners/<p>    {"coordinator_id", "epoch"}  (no lease: the epoch
                                          history must survive the owner)
    /headwater/coordinators/txn_owners/<p>  the same for ``__transaction_state`` partitions

One process runs two :class:`Ownership` instances over the same live ids and the same
:class:`~services.coordinator.registration.CoordinatorRegistration` (which writes the ids key
under the process's lease): the group one (``__consumer_offsets``, owners prefix
``OWNERS_PREFIX``) and the transaction one (``TXN_OWNERS_PREFIX``).

Lease loss: the registration tells both ownerships at once; each drops every runtime from
``runtimes`` (requests for those groups and transactions get NOT_COORDINATOR) and cancels its
tasks, and takes nothing while unregistered. Once the registration is back under a new lease,
the next round takes the partitions that map here again, each with a new epoch (the owners
key and the epoch marker fence the previous owner, as on any take). A take whose etcd
transaction completes after the registration it started under was lost does not start a
runtime.

Assignment: partition ``p`` belongs to ``sorted(live ids)[p % n]``. Taking ``p``: read the
owners key, write epoch = previous + 1 with a transaction comparing the mod revision read
(absent when there was none); only then start the partition's runtime, which fences older
owners through its epoch marker. Releasing: stop the runtime (its requests get
NOT_COORDINATOR); the owners key stays, the next owner bumps the epoch.

:class:`Ownership` runs as one task (``coordinator-ownership``) that owns ``runtimes`` (read
by the servicer on the same loop); a helper task watches the ids prefix and wakes it, and so
does a runtime task that ends (rounds are at least ``MIN_ROUND_GAP_S`` apart); it also
re-checks every second: a runtime that gave its partition up after fencing or a failed append
is retaken with a new epoch while the partition still maps here, and a runtime whose
(coordinator id, epoch) is no longer what the owners key records is released and retaken (two
coordinators can take a partition within milliseconds during start-up; the one with the lower
epoch must not keep serving when the other released it before its marker landed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from headwater import timeouts
from headwater.client.partitioner import crc32c_partition
from headwater.platform import etcd as hetcd
from services.coordinator.log_runtime import LogRuntime
from services.coordinator.registration import IDS_PREFIX, CoordinatorRegistration

log = logging.getLogger(__name__)

OWNERS_PREFIX = "/headwater/coordinators/owners/"
TXN_OWNERS_PREFIX = "/headwater/coordinators/txn_owners/"
#: The least time between two reconcile rounds (two owners fencing each other while their
#: views of the live ids differ must not bump epochs in a tight loop).
MIN_ROUND_GAP_S = 0.1


def partition_for(group_id: str, partitions: int) -> int:
    """The offsets-topic partition of a group: unsigned CRC32C of the UTF-8 group id mod the
    partition count — coordinator.proto's rule, the same as the key partitioner's."""
    return crc32c_partition(group_id.encode(), partitions)


def assigned(live_ids: list[int], me: int, partitions: int) -> set[int]:
    ids = sorted(live_ids)
    if me not in ids:
        return set()
    return {p for p in range(partitions) if ids[p % len(ids)] == me}


async def live_ids(etcd: hetcd.Etcd) -> list[int]:
    snap = await etcd.get_prefix(IDS_PREFIX)
    out = []
    for kv in snap.items:
        with contextlib.suppress(ValueError):
            out.append(int(kv.key[len(IDS_PREFIX) :]))
    return sorted(out)


async def owner_of(
    etcd: hetcd.Etcd, partition: int, owners_prefix: str = OWNERS_PREFIX
) -> dict[str, object] | None:
    """The live owner's registration ({"coordinator_id", "host", "port", ...}) or None."""
    got = await etcd.get(f"{owners_prefix}{partition}")
    if got is None:
        return None
    try:
        cid = int(json.loads(got[0])["coordinator_id"])
    except (ValueError, KeyError, TypeError):
        return None
    reg = await etcd.get(f"{IDS_PREFIX}{cid}")
    if reg is None:
        return None
    try:
        value = json.loads(reg[0])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class Ownership:
    """See the module docstring."""

    def __init__(
        self,
        etcd: hetcd.Etcd,
        *,
        coordinator_id: int,
        registration: CoordinatorRegistration,
        partitions: int,
        make_runtime: Callable[[int, int], LogRuntime[Any]],
        owners_prefix: str = OWNERS_PREFIX,
        task_prefix: str = "coordinator-partition",
    ) -> None:
        """``registration``: this process's (registered by the caller before :meth:`run`)."""
        self.etcd = etcd
        self.coordinator_id = coordinator_id
        self.partitions = partitions
        self.runtimes: dict[int, LogRuntime[Any]] = {}
        self._owners_prefix = owners_prefix
        self._task_prefix = task_prefix
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._registration = registration
        self._make_runtime = make_runtime
        self._wake = asyncio.Event()
        registration.add_listener(self._registration_changed)

    def _registration_changed(self, registered: bool) -> None:
        """On a lease loss stop serving at once: the runtimes leave ``runtimes`` (the
        servicers answer NOT_COORDINATOR) and their tasks are cancelled (queued and parked
        requests get NOT_COORDINATOR); the next round releases them and waits."""
        if not registered:
            if self._tasks:
                log.warning(
                    "coordinator %d: lease lost, giving up %s partitions %s",
                    self.coordinator_id, self._task_prefix, sorted(self._tasks),
                )  # fmt: skip
            self.runtimes.clear()
            for task in self._tasks.values():
                task.cancel()
        self._wake.set()

    async def run(self) -> None:
        watcher = asyncio.create_task(self._watch(), name=f"{self._task_prefix}-ids-watch")
        try:
            while True:
                # cleared BEFORE reconciling: a wake-up (ids changed, a runtime ended) that
                # arrives while reconciling makes the next round start at once instead of
                # being lost for a second (start-up: a peer registering while this one takes
                # partitions it no longer maps to kept both owners churning for ~1 s)
                self._wake.clear()
                try:
                    await self._reconcile()
                except hetcd.EtcdError as exc:
                    log.warning("ownership reconcile failed: %s", exc)
                await asyncio.sleep(MIN_ROUND_GAP_S)
                with contextlib.suppress(TimeoutError):
                    await timeouts.wait_for(self._wake.wait(), 1.0 - MIN_ROUND_GAP_S)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            for p in list(self._tasks):
                await self._release(p)

    async def _watch(self) -> None:
        while True:
            try:
                snap = await self.etcd.get_prefix(IDS_PREFIX)
                self._wake.set()
                w = await self.etcd.watch_prefix(IDS_PREFIX, start_revision=snap.revision + 1)
                try:
                    async for _ev in w:
                        self._wake.set()
                finally:
                    await w.cancel()
            except hetcd.EtcdError as exc:
                log.warning("coordinator ids watch ended (%s); re-reading", exc)
            await asyncio.sleep(0.5)

    async def _reconcile(self) -> None:
        generation = self._registration.generation
        if not self._registration.current(generation):
            for p in list(self._tasks):
                await self._release(p)
            return
        mine = assigned(await live_ids(self.etcd), self.coordinator_id, self.partitions)
        recorded = await self._recorded_owners() if self._tasks else {}
        for p, task in list(self._tasks.items()):
            rt = self.runtimes.get(p)
            ours = (self.coordinator_id, rt.epoch) if rt is not None else None
            superseded = recorded.get(p) != ours
            if p not in mine or task.done() or superseded:
                if superseded and p in mine and not task.done():
                    log.warning(
                        "partition %d: owners key is %s, not ours at epoch %s; retaking",
                        p, recorded.get(p), ours,
                    )  # fmt: skip
                await self._release(p)
        for p in sorted(mine - set(self._tasks)):
            await self._take(p, generation)

    async def _recorded_owners(self) -> dict[int, tuple[int, int]]:
        """``{partition: (coordinator_id, epoch)}`` as etcd records it now. A runtime whose
        pair is not there was superseded (another coordinator bumped the epoch, perhaps
        without ever writing its marker): it must not go on serving."""
        snap = await self.etcd.get_prefix(self._owners_prefix)
        out: dict[int, tuple[int, int]] = {}
        for kv in snap.items:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                value = json.loads(kv.value)
                out[int(kv.key[len(self._owners_prefix) :])] = (
                    int(value["coordinator_id"]),
                    int(value["epoch"]),
                )
        return out

    async def _take(self, p: int, generation: int) -> None:
        key = f"{self._owners_prefix}{p}"
        got = await self.etcd.get(key)
        if got is None:
            epoch, cmp = 1, hetcd.cmp_absent(key)
        else:
            try:
                epoch = int(json.loads(got[0])["epoch"]) + 1
            except (ValueError, KeyError, TypeError):
                epoch = 1
            cmp = hetcd.cmp_mod(key, "==", got[1].mod_revision)
        value = json.dumps({"coordinator_id": self.coordinator_id, "epoch": epoch})
        res = await self.etcd.txn([cmp], [hetcd.op_put(key, value)])
        if not res.succeeded:
            log.info("partition %d: ownership CAS lost; retrying later", p)
            return
        if not self._registration.current(generation):
            log.warning("partition %d: registration lost while taking it; not serving", p)
            return
        rt = self._make_runtime(p, epoch)
        self.runtimes[p] = rt
        task = asyncio.create_task(rt.run(), name=f"{self._task_prefix}-{p}-e{epoch}")
        task.add_done_callback(lambda _t: self._wake.set())  # fenced / given up: retake soon
        self._tasks[p] = task
        log.info(
            "coordinator %d took %s %d at epoch %d",
            self.coordinator_id,
            self._task_prefix,
            p,
            epoch,
        )

    async def _release(self, p: int) -> None:
        task = self._tasks.pop(p)
        self.runtimes.pop(p, None)
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        log.info("coordinator %d released partition %d", self.coordinator_id, p)
