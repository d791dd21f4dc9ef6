"""Live group coordinators, as registered in etcd, for the metadata pushed to brokers.

Each coordinator process (``services.coordinator``) holds ``/headwater/coordinators/ids/<id>``
= JSON ``{"coordinator_id", "host", "port", "metrics_url"}`` under its own lease. While active,
the controller runs one task (:func:`watch`, named ``coordinator-watch``) that reads the
prefix, then watches it, and after every change posts the complete sorted list to the
controller's event loop (``CoordinatorsChanged``); the event loop — the only owner of
``ControllerLoop.coordinators`` — stores it and pushes UpdateMetadata, whose ``coordinators``
the brokers copy into their Metadata answers so clients can find a coordinator.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from headwater.platform import etcd as hetcd
from headwater.v1 import metadata_pb2

log = logging.getLogger(__name__)

COORDINATORS_PREFIX = "/headwater/coordinators/ids/"


def decode(items: list[hetcd.KeyValue]) -> tuple[metadata_pb2.BrokerInfo, ...]:
    """Registrations -> BrokerInfo (broker_id holds the coordinator id), sorted by id.
    Malformed values are logged and skipped."""
    out: list[metadata_pb2.BrokerInfo] = []
    for kv in items:
        try:
            v = json.loads(kv.value)
            info = metadata_pb2.BrokerInfo(
                broker_id=int(v["coordinator_id"]),
                host=str(v["host"]),
                port=int(v["port"]),
                metrics_url=str(v.get("metrics_url", "")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            log.error("ignoring malformed coordinator registration %s: %r", kv.key, exc)
            continue
        out.append(info)
    return tuple(sorted(out, key=lambda b: b.broker_id))


async def watch(
    etcd: hetcd.Etcd, post: Callable[[tuple[metadata_pb2.BrokerInfo, ...]], None]
) -> None:
    """Post the live coordinators now and after every change (runs until cancelled)."""
    last: tuple[metadata_pb2.BrokerInfo, ...] | None = None
    while True:
        try:
            snap = await etcd.get_prefix(COORDINATORS_PREFIX)
            current = decode(snap.items)
            if current != last:
                post(current)
                last = current
            w = await etcd.watch_prefix(COORDINATORS_PREFIX, start_revision=snap.revision + 1)
            try:
                async for _ev in w:
                    current = decode((await etcd.get_prefix(COORDINATORS_PREFIX)).items)
                    if current != last:
                        post(current)
                        last = current
            finally:
                await w.cancel()
        except hetcd.EtcdError as exc:
            log.warning("coordinator watch ended (%s); re-reading", exc)
        await asyncio.sleep(0.5)
