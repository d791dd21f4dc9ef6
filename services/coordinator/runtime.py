"""One owned partition of ``__consumer_offsets``: its GroupTable and the group handlers.

:class:`PartitionRuntime` is a :class:`~services.coordinator.log_runtime.LogRuntime` (one task
per owned partition: epoch marker, replay, append-then-read-back before answering, fencing;
see that module) whose table is a :class:`GroupTable` and whose requests are the group
coordinator's: typed requests whose pure handlers (``membership`` / ``offsets`` /
``txn_offsets``), registered by type in ``group_handlers.HANDLERS``, give an
:class:`Outcome`. Every ~150 ms ``membership.tick`` drives session / rebalance timeouts, and
every ~5 s ``offsets.expire`` writes retention tombstones. Parked requests (JoinGroup /
SyncGroup long polls) and queued ones get NOT_COORDINATOR in-band when the runtime stops.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from headwater.client import AsyncProducer
from services.coordinator import membership, offsets
from services.coordinator.group import GroupTable
from services.coordinator.group_handlers import HANDLERS, not_coordinator
from services.coordinator.log_runtime import LogRuntime, Request
from services.coordinator.outcome import Ctx, Outcome

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
EXPIRE_EVERY_S = 5.0


class PartitionRuntime(LogRuntime[GroupTable]):
    """See the module docstring. Create, then run :meth:`run` as a task."""

    def __init__(
        self,
        *,
        partition: int,
        epoch: int,
        coordinator_id: int,
        producer: AsyncProducer,
        bootstrap: str,
        topic: str = OFFSETS_TOPIC,
        offsets_retention_ms: int = 7 * 24 * 3600 * 1000,
        append_timeout_s: float = 15.0,
        on_rebalance: Callable[[str, int], None] | None = None,
    ) -> None:
        super().__init__(
            partition=partition,
            epoch=epoch,
            coordinator_id=coordinator_id,
            producer=producer,
            bootstrap=bootstrap,
            topic=topic,
            table=GroupTable(),
            append_timeout_s=append_timeout_s,
        )
        self._retention_ms = offsets_retention_ms
        self._on_rebalance = on_rebalance
        self._ids = itertools.count(1)
        self._next_expire = time.monotonic() + EXPIRE_EVERY_S

    def _not_coordinator(self, request: object) -> Any:
        return not_coordinator(request)

    def _summary(self) -> str:
        return f"{len(self._table.groups)} groups"

    async def _periodic(self) -> None:
        parked = {k for k, r in self._parked.items() if not r.future.done()}
        await self._commit(membership.tick(self._table, self._ctx(), parked))
        if time.monotonic() >= self._next_expire:
            self._next_expire = time.monotonic() + EXPIRE_EVERY_S
            await self._commit(offsets.expire(self._table, self._ctx()))

    def _ctx(self) -> Ctx:
        return Ctx(
            now_ms=int(time.time() * 1000),
            epoch=self.epoch,
            new_member_id=lambda client: f"{client or 'member'}-{uuid.uuid4().hex[:12]}",
            offsets_retention_ms=self._retention_ms,
        )

    async def _handle(self, req: Request) -> None:
        await self._commit(HANDLERS.handle(self._table, req.request, self._ctx()), req)

    async def _commit(self, out: Outcome, req: Request | None = None) -> None:
        await super()._commit(out, req)
        for group_id, duration_ms in out.rebalances:
            if self._on_rebalance is not None:
                self._on_rebalance(group_id, duration_ms)
