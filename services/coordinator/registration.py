"""The coordinator's registration in etcd, kept through lease losses.

Key ``/headwater/coordinators/ids/<id>`` holds JSON ``{"coordinator_id", "host", "port",
"metrics_url"}`` attached to a lease of ``ttl`` seconds that the adapter's keepalive task
refreshes. The live ids decide which coordinator owns which partition
(:func:`services.coordinator.ownership.assigned`); the ownership itself is fenced by the
epochs in the owners keys and the epoch markers in the partitions' logs, never by the lease.

Contract:

* :meth:`CoordinatorRegistration.register` grants a lease and writes the key (after a lease
  loss, the old lease is revoked best-effort first, so the key ends up under the new one).
  ``registered`` is set while the current lease is believed alive; ``generation`` counts
  registrations (a partition taken under generation ``g`` must not start serving once the
  generation moved on or ``registered`` was cleared).
* Lease loss (etcd answered TTL 0, or no refresh succeeded for a whole TTL, e.g. etcd paused):
  ``registered`` is cleared and every ``on_change(False)`` listener runs at once, on the loop
  (the ownerships stop serving their partitions: NOT_COORDINATOR until re-acquired). The
  ``coordinator-registration`` task (:meth:`run`) then registers again under a new lease,
  retrying etcd failures with capped exponential backoff (0.2 s doubling to 5 s), and runs
  ``on_change(True)``. The process never exits for a lost lease (as the broker's
  ``services.broker.registration``).
* :meth:`close` revokes the lease (the key goes at once: peers take the partitions over).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

from headwater.platform import etcd as hetcd

log = logging.getLogger(__name__)

IDS_PREFIX = "/headwater/coordinators/ids/"
#: Re-registration backoff: first delay, factor 2, cap (seconds).
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0


class CoordinatorRegistration:
    """Registers ``coordinator_id`` and keeps it registered (see the module docstring)."""

    def __init__(
        self,
        etcd: hetcd.Etcd,
        coordinator_id: int,
        value: dict[str, object],
        *,
        ttl: int = 5,
    ) -> None:
        self._etcd = etcd
        self.coordinator_id = coordinator_id
        self.key = f"{IDS_PREFIX}{coordinator_id}"
        self._value = json.dumps(value)
        self._ttl = ttl
        self._lease: hetcd.LeaseKeeper | None = None
        self._lost = asyncio.Event()
        self._listeners: list[Callable[[bool], None]] = []
        self.registered = asyncio.Event()
        self.generation = 0

    def add_listener(self, on_change: Callable[[bool], None]) -> None:
        """``on_change(False)`` on a lease loss, ``on_change(True)`` after re-registering."""
        self._listeners.append(on_change)

    def current(self, generation: int) -> bool:
        """True while registered under the registration numbered ``generation``."""
        return self.registered.is_set() and self.generation == generation

    async def register(self) -> None:
        """Grant a lease and write the key under it (raises EtcdError)."""
        old, self._lease = self._lease, None
        if old is not None:
            with contextlib.suppress(hetcd.EtcdError):
                await old.revoke()
        self._lost.clear()
        lease = await self._etcd.grant_lease(
            self._ttl, on_lost=self._on_lease_lost, name=f"coordinator-{self.coordinator_id}-lease"
        )
        try:
            await self._etcd.put(self.key, self._value, lease=lease)
        except BaseException:
            with contextlib.suppress(hetcd.EtcdError):
                await lease.revoke()
            raise
        self._lease = lease
        self.generation += 1
        self.registered.set()
        log.info(
            "registered coordinator %d in etcd (lease %x, registration %d)",
            self.coordinator_id,
            lease.id,
            self.generation,
        )
        self._notify(True)

    def _on_lease_lost(self) -> None:
        self.registered.clear()
        self._lost.set()
        self._notify(False)

    def _notify(self, registered: bool) -> None:
        for listener in self._listeners:
            try:
                listener(registered)
            except Exception:
                log.exception("registration listener failed")

    async def run(self) -> None:
        """The ``coordinator-registration`` task: re-register whenever the lease is lost."""
        while True:
            await self._lost.wait()
            log.error(
                "coordinator %d lost its etcd lease; released its partitions, re-registering",
                self.coordinator_id,
            )
            delay = RETRY_FIRST_S
            while True:
                try:
                    await self.register()
                    break
                except hetcd.EtcdError as exc:
                    log.warning("re-registration failed: %s; retrying in %.1fs", exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_S)

    async def close(self) -> None:
        """Revoke the lease (the key goes at once, so peers take the partitions over)."""
        self.registered.clear()
        lease, self._lease = self._lease, None
        if lease is not None:
            with contextlib.suppress(hetcd.EtcdError):
                await lease.revoke()
