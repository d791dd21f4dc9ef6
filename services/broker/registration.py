"""The broker's registration in etcd: its liveness and its epoch.

Key ``/headwater/brokers/ids/<id>`` holds JSON ``{"broker_id", "host", "port", "rack",
"metrics_url", "static_configs"}`` (static_configs: the start-up configs DescribeConfigs
reports) attached to a lease of ``LEASE_TTL_S`` seconds that the adapter's keepalive thread
refreshes. The key is created with a create-if-absent transaction; its create revision
is the **broker epoch** (a new incarnation always gets a larger one). The controller watches
these keys for liveness and stamps the epoch on its requests to this broker.

Startup: if the key already exists, it belongs either to a live process with the same broker
id (a configuration error) or to this broker's previous incarnation whose lease has not
expired yet (a crash a moment ago). ``register`` therefore retries until one lease TTL (plus
margin) has passed and then fails loudly with :class:`RegistrationConflictError`.

Lease loss (etcd said the lease is gone, or no refresh succeeded for a whole TTL): the
``broker-registration`` task (:meth:`Registration.run`, owned by the server) clears the epoch
— control requests are refused as ``STALE_BROKER_EPOCH`` meanwhile — revokes the old lease
best-effort, and registers again under a new lease, taking the new epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

from headwater.platform import etcd as hetcd

log = logging.getLogger(__name__)

LEASE_TTL_S = 10
KEY_PREFIX = "/headwater/brokers/ids/"


class RegistrationConflictError(RuntimeError):
    """Another live process holds this broker id's registration key."""


def broker_key(broker_id: int) -> str:
    return f"{KEY_PREFIX}{broker_id}"


class Registration:
    """Registers ``broker_id`` and keeps it registered; reports each new epoch."""

    def __init__(
        self,
        client: hetcd.Etcd,
        broker_id: int,
        *,
        host: str,
        port: int,
        rack: str,
        metrics_url: str,
        on_epoch: Callable[[int | None], None],
        ttl: int = LEASE_TTL_S,
        static_configs: dict[str, str] | None = None,
    ) -> None:
        self._etcd = client
        self.broker_id = broker_id
        self.key = broker_key(broker_id)
        self._value = json.dumps(
            {
                "broker_id": broker_id,
                "host": host,
                "port": port,
                "rack": rack,
                "metrics_url": metrics_url,
                "static_configs": static_configs or {},
            }
        )
        self._on_epoch = on_epoch
        self._ttl = ttl
        self._lease: hetcd.LeaseKeeper | None = None
        self._lost = asyncio.Event()
        self.epoch: int | None = None

    async def register(self, *, wait_s: float | None = None) -> int:
        """Create the key under a fresh lease; returns the broker epoch.

        Raises RegistrationConflictError if the key stays held by another lease for
        ``wait_s`` seconds (default: 1.5 times the TTL).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self._ttl * 1.5 if wait_s is None else wait_s)
        while True:
            self._lost.clear()
            lease = await self._etcd.grant_lease(
                self._ttl, on_lost=self._lost.set, name=f"broker-{self.broker_id}-lease"
            )
            res = await self._etcd.txn(
                [hetcd.cmp_absent(self.key)],
                [hetcd.op_put(self.key, self._value, lease)],
                [hetcd.op_get(self.key)],
            )
            if res.succeeded:
                self._lease = lease
                self.epoch = res.revision
                log.info("registered broker %d in etcd (epoch %d)", self.broker_id, self.epoch)
                self._on_epoch(self.epoch)
                return self.epoch
            await lease.revoke()
            holder = ""
            if res.responses and isinstance(res.responses[0], list) and res.responses[0]:
                holder = res.responses[0][0].value.decode(errors="replace")
            if loop.time() >= deadline:
                raise RegistrationConflictError(
                    f"broker id {self.broker_id} is already registered in etcd at {self.key} "
                    f"by another live process ({holder}); refusing to start"
                )
            log.warning(
                "%s is held by %s (a live broker, or this broker's previous run whose lease "
                "has not expired yet); retrying",
                self.key,
                holder,
            )
            await asyncio.sleep(0.5)

    async def run(self) -> None:
        """The ``broker-registration`` task: re-register whenever the lease is lost."""
        while True:
            await self._lost.wait()
            log.error("broker %d lost its etcd lease; re-registering", self.broker_id)
            self.epoch = None
            self._on_epoch(None)
            old, self._lease = self._lease, None
            if old is not None:
                with contextlib.suppress(hetcd.EtcdError):
                    await old.revoke()
            delay = 0.2
            while True:
                try:
                    await self.register()
                    break
                except (hetcd.EtcdError, RegistrationConflictError) as exc:
                    log.warning("re-registration failed: %s; retrying in %.1fs", exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)

    async def close(self) -> None:
        """Revoke the lease (deleting the key at once, so the controller sees us leave)."""
        lease, self._lease = self._lease, None
        if lease is not None:
            with contextlib.suppress(hetcd.EtcdError):
                await lease.revoke()
        self.epoch = None
