"""Leases: :class:`LeaseKeeper`, a granted lease and the keepalive thread that keeps it alive.

A LeaseKeeper owns one named keepalive thread (not a task on the loop: a handler holding the
loop for a while must not cost the process its lease — the one part of the etcd client that
is not on the event loop); the lease's loss (refresh answered with TTL 0, or no successful
refresh for a whole TTL) is reported once, on the loop, through the ``lost`` event and the
optional ``on_lost`` callback. A loop that has not run for :data:`LOOP_STALL_LIMIT_S` is taken
for wedged: the keeper stops refreshing, so the lease expires and another process can take
over what it guarded.

Leases are granted by :meth:`headwater.platform.etcd.Etcd.grant_lease`, which hands the keeper
its blocking refresh (etcd's ``LeaseKeepAlive`` stream on the client's synchronous gRPC
channel, which its keepers share) and its revoke call (on the loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from headwater.platform.etcd.errors import EtcdError, wrap

log = logging.getLogger(__name__)

#: Delay before the next lease refresh after a failed one (seconds; normally ttl / 3).
RETRY_REFRESH_S = 0.5
#: A keepalive thread stops refreshing when its event loop has not run for this long.
LOOP_STALL_LIMIT_S = 30.0


class LeaseKeeper:
    """A granted lease plus the keepalive thread that keeps it alive.

    The thread (owned by this object, named) refreshes every ``ttl / 3`` seconds, whatever the
    event loop is doing. Refresh failures are logged and retried after ``RETRY_REFRESH_S``;
    the lease is declared lost when etcd answers TTL 0 or when no refresh has succeeded for
    ``ttl`` seconds (by then etcd has expired it). The loss is reported on the loop. While the
    loop has not run for ``LOOP_STALL_LIMIT_S`` seconds the thread does not refresh (a wedged
    process gives its lease up).

    ``refresh(lease_id, timeout)`` is the blocking keepalive round trip, run in the thread:
    it returns the lease's remaining TTL (0: the lease is gone) or raises (any exception: the
    refresh failed; it must give up after ``timeout`` seconds). ``revoke(lease_id)`` revokes
    on the loop.
    """

    def __init__(
        self,
        lease_id: int,
        ttl: int,
        on_lost: Callable[[], None] | None,
        *,
        refresh: Callable[[int, float], int],
        revoke: Callable[[int], Awaitable[None]],
    ) -> None:
        self.id = lease_id
        self.ttl = ttl
        self.lost = asyncio.Event()
        self._on_lost = on_lost
        self._refresh_call = refresh
        self._revoke_call = revoke
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._last_ok = time.monotonic()
        self._loop_seen = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, name: str) -> None:
        """Start the keepalive thread (named ``name-<lease id>``); on the loop."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._keepalive, name=f"{name}-{self.id:x}", daemon=True
        )
        self._thread.start()

    def _mark_lost(self) -> None:
        """Runs on the loop."""
        if self.lost.is_set():
            return
        self.lost.set()
        log.warning("etcd lease %x lost", self.id)
        if self._on_lost is not None:
            try:
                self._on_lost()
            except Exception:
                log.exception("lease %x on_lost callback failed", self.id)

    def _on_loop(self, fn: Callable[[], None]) -> bool:
        """Schedule ``fn`` on the loop from the keepalive thread; False once the loop is gone."""
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:  # loop closed
            return False
        return True

    def _seen(self) -> None:
        self._loop_seen = time.monotonic()

    def _refresh(self, timeout: float) -> int:
        """One keepalive round trip from the thread; the remaining TTL (0: lease gone)."""
        try:
            return int(self._refresh_call(self.id, timeout))
        except Exception as exc:
            raise wrap(exc) from exc

    def _keepalive(self) -> None:
        interval = max(self.ttl / 3.0, 0.2)
        wait = interval
        while not self._stop.wait(wait):
            if not self._on_loop(self._seen):
                return
            stalled = time.monotonic() - self._loop_seen
            if stalled > max(LOOP_STALL_LIMIT_S, interval * 2):
                log.error(
                    "lease %x: the event loop has not run for %.0f s; not refreshing",
                    self.id,
                    stalled,
                )
                wait = interval
                continue
            try:
                remaining = self._refresh(interval * 2)
            except EtcdError as exc:
                log.warning("lease %x refresh failed: %s", self.id, exc)
                if time.monotonic() - self._last_ok >= self.ttl:
                    self._on_loop(self._mark_lost)
                    return
                # retry soon: the refresh that ends an outage must not wait a whole interval
                wait = min(interval, RETRY_REFRESH_S)
                continue
            if remaining <= 0:
                self._on_loop(self._mark_lost)
                return
            self._last_ok = time.monotonic()
            wait = interval

    async def revoke(self) -> None:
        """Stop the keepalive and revoke the lease (deleting its keys). Idempotent."""
        await self.stop()
        if not self.lost.is_set():
            self.lost.set()
            with contextlib.suppress(EtcdError):
                await self._revoke_call(self.id)

    async def stop(self) -> None:
        """Stop refreshing without revoking (the lease then expires after its TTL)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            await asyncio.to_thread(thread.join)


def lease_id_of(lease: LeaseKeeper | int | None) -> int | None:
    """The lease id a ``lease=`` argument names (a keeper or a bare id; None for no lease)."""
    return lease.id if isinstance(lease, LeaseKeeper) else lease
