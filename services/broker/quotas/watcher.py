"""Keeps a :class:`QuotaManager`'s configs equal to etcd's ``/headwater/configs/``.

One task (``broker-quota-configs``): read the whole prefix, replace the configs, then watch
from the next revision and apply each change (put or delete of one entity) as it comes; when
the watch ends (etcd restarted, revision compacted) read everything again. Changes therefore
apply without restart, within one etcd watch round trip.
"""

from __future__ import annotations

import asyncio
import logging

from headwater.platform import etcd as hetcd
from services.broker.quotas import entities
from services.broker.quotas.manager import QuotaManager

log = logging.getLogger(__name__)

RETRY_S = 0.5


def load(manager: QuotaManager, snapshot: hetcd.PrefixSnapshot) -> None:
    """Replace the configs with a full snapshot of the prefix."""
    manager.configs.clear()
    for kv in snapshot.items:
        manager.configs.apply(kv.key, kv.value)
    manager.configs_changed()


async def run(manager: QuotaManager, client: hetcd.Etcd) -> None:
    """Forever: snapshot, then watch (see module docstring)."""
    while True:
        try:
            snap = await client.get_prefix(entities.CONFIGS_PREFIX)
            load(manager, snap)
            watch = await client.watch_prefix(
                entities.CONFIGS_PREFIX, start_revision=snap.revision + 1
            )
            try:
                async for ev in watch:
                    value = ev.value if ev.kind == "put" else None
                    if manager.configs.apply(ev.key, value):
                        manager.configs_changed()
            finally:
                await watch.cancel()
        except hetcd.EtcdError as exc:
            log.warning("quota config watch ended (%s); re-reading", exc)
        await asyncio.sleep(RETRY_S)
