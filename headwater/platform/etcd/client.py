"""The etcd client: :class:`Etcd`, connection and key/value, transaction, lease and watch calls.

Every blocking pyetcd call runs in the adapter's own ``ThreadPoolExecutor`` (never on the event
loop, never in the loop's default executor, so a slow etcd cannot starve ``asyncio.to_thread``
users such as storage I/O). A failed call never puts etcd aside: the next call tries it again
(an outage ends for every client as soon as etcd answers again). Leases are kept alive by
:mod:`headwater.platform.etcd.lease`, watches delivered by :mod:`headwater.platform.etcd.watch`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pyetcd

from headwater.platform.etcd.errors import EtcdError, wrap
from headwater.platform.etcd.kv import (
    Compare,
    KeyMeta,
    KeyValue,
    Op,
    PrefixSnapshot,
    TxnResult,
    key_meta,
    to_bytes,
    to_pyetcd_compare,
    to_pyetcd_op,
)
from headwater.platform.etcd.lease import LeaseKeeper, lease_id_of
from headwater.platform.etcd.watch import Watch

T = TypeVar("T")

#: Default deadline for one etcd RPC (seconds).
DEFAULT_RPC_TIMEOUT = 5.0


# --------------------------------------------------------------------------- the client


def _client(
    host: str, port: int, timeout: float, ca: str | None, cert: str | None, key: str | None
) -> Any:
    """A pyetcd client of one endpoint that is never put aside.

    pyetcd marks an endpoint "failed" for ``time_retry`` seconds (300 by default) after one
    UNAVAILABLE / DEADLINE_EXCEEDED answer, and then refuses every call with "Trying to use a
    failed node" without trying it — meant to fail over between several endpoints. With the
    one endpoint Headwater configures, a few seconds of etcd outage (a pause, a restart)
    left a service unable to reach etcd for five minutes after etcd came back. ``time_retry``
    0: every call tries etcd again (gRPC reconnects the channel by itself)."""
    creds = (
        pyetcd.MultiEndpointEtcd3Client.get_secure_creds(ca, key, cert) if ca is not None else None
    )
    endpoint = pyetcd.Endpoint(host, port, secure=ca is not None, creds=creds, time_retry=0.0)
    return pyetcd.MultiEndpointEtcd3Client(endpoints=[endpoint], timeout=timeout)


class Etcd:
    """Async etcd client. Create with :meth:`connect`; close with :meth:`close`.

    Safe to use from one event loop (the one that called :meth:`connect`); the methods may be
    awaited concurrently (the executor has several worker threads).
    """

    def __init__(self, client: Any, endpoint: str, executor: concurrent.futures.Executor):
        self._client = client
        self.endpoint = endpoint
        self._executor = executor
        self._loop = asyncio.get_running_loop()
        self._closed = False

    @classmethod
    async def connect(
        cls,
        endpoint: str,
        *,
        timeout: float = DEFAULT_RPC_TIMEOUT,
        workers: int = 4,
        ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
    ) -> Etcd:
        """Connect to ``"host:port"`` and check the server answers (raises EtcdError).

        ``ca`` (PEM path) turns TLS on and verifies etcd's certificate; ``cert``/``key`` add a
        client certificate (etcd's ``--client-cert-auth``). A certificate without ``ca`` or
        without its key raises EtcdError.
        """
        if (cert is None) != (key is None) or (cert is not None and ca is None):
            raise EtcdError("etcd TLS: cert and key go together, and need ca")
        host, _, port_text = endpoint.rpartition(":")
        if not host or not port_text.isdigit():
            raise EtcdError(f"bad etcd endpoint {endpoint!r}; expected HOST:PORT")
        executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="etcd"
        )
        loop = asyncio.get_running_loop()
        try:
            client = await loop.run_in_executor(
                executor, lambda: _client(host, int(port_text), timeout, ca, cert, key)
            )
            self = cls(client, endpoint, executor)
            await self._call(client.status)
        except BaseException as exc:
            executor.shutdown(wait=False)
            raise wrap(exc) from exc
        return self

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise EtcdError("etcd client is closed")

        def run() -> T:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                raise wrap(exc) from exc

        return await self._loop.run_in_executor(self._executor, run)

    # ---- key/value

    async def get(self, key: str) -> tuple[bytes, KeyMeta] | None:
        def run() -> tuple[bytes, KeyMeta] | None:
            resp = self._client.get_response(key)
            if not resp.kvs:
                return None
            kv = resp.kvs[0]
            return bytes(kv.value), key_meta(kv)

        return await self._call(run)

    async def get_prefix(self, prefix: str) -> PrefixSnapshot:
        def run() -> PrefixSnapshot:
            resp = self._client.get_prefix_response(prefix, sort_order="ascend")
            items = [KeyValue(kv.key.decode(), bytes(kv.value), key_meta(kv)) for kv in resp.kvs]
            return PrefixSnapshot(int(resp.header.revision), items)

        return await self._call(run)

    async def put(
        self, key: str, value: str | bytes, *, lease: LeaseKeeper | int | None = None
    ) -> int:
        """Write ``key``; returns the store revision of the write."""
        lease_id = lease_id_of(lease)

        def run() -> int:
            resp = self._client.put(key, to_bytes(value), lease=lease_id)
            return int(resp.header.revision)

        return await self._call(run)

    async def delete(self, key: str) -> bool:
        """Delete ``key``; True when it existed."""
        return bool(await self._call(self._client.delete, key))

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix``; returns how many were deleted."""
        resp = await self._call(self._client.delete_prefix, prefix)
        return int(resp.deleted)

    async def txn(
        self, compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """One atomic etcd transaction: if every comparison holds run ``success``, else
        ``failure``."""

        def run() -> TxnResult:
            c = self._client
            ok, responses = c.transaction(
                compare=[to_pyetcd_compare(c, x) for x in compare],
                success=[to_pyetcd_op(c, x) for x in success],
                failure=[to_pyetcd_op(c, x) for x in failure],
            )
            out: list[list[KeyValue] | int | None] = []
            revision = 0
            for r in responses:
                if isinstance(r, list):
                    out.append([KeyValue(m.key.decode(), bytes(v), key_meta(m)) for v, m in r])
                    continue
                kind = r.WhichOneof("response")
                if kind == "response_put":
                    revision = max(revision, int(r.response_put.header.revision))
                    out.append(None)
                elif kind == "response_delete_range":
                    revision = max(revision, int(r.response_delete_range.header.revision))
                    out.append(int(r.response_delete_range.deleted))
                else:
                    out.append(None)
            return TxnResult(bool(ok), revision, out)

        return await self._call(run)

    # ---- leases

    async def grant_lease(
        self,
        ttl: int,
        *,
        on_lost: Callable[[], None] | None = None,
        name: str = "etcd-lease",
    ) -> LeaseKeeper:
        """Grant a lease of ``ttl`` seconds and start its keepalive thread (refresh every ttl/3).

        ``on_lost`` runs on the loop, once, when the lease is lost.
        """
        lease = await self._call(self._client.lease, ttl)
        keeper = LeaseKeeper(
            int(lease.id),
            int(lease.ttl),
            on_lost,
            executor=self._executor,
            refresh=self._client.refresh_lease,
            revoke=self.revoke_lease,
        )
        keeper.start(name)
        return keeper

    async def lease_granted_ttl(self, lease_id: int) -> int:
        """The TTL a lease was granted with (-1 when it no longer exists)."""

        def run() -> int:
            info = self._client.get_lease_info(lease_id)
            return int(info.grantedTTL) if int(info.TTL) >= 0 else -1

        return int(await self._call(run))

    async def revoke_lease(self, lease_id: int) -> None:
        """Revoke a lease by id (its keys are deleted at once, as on expiry; the holder's
        keepalive then reports the lease lost). :meth:`LeaseKeeper.revoke` calls this."""
        await self._call(self._client.revoke_lease, lease_id)

    # ---- watches

    async def watch_prefix(self, prefix: str, *, start_revision: int | None = None) -> Watch:
        """Start watching every key under ``prefix``; iterate the result for events.

        With ``start_revision`` the watch replays changes since that revision first.
        """
        watch = Watch(prefix, self._cancel_watch)
        kwargs: dict[str, Any] = {}
        if start_revision is not None:
            kwargs["start_revision"] = start_revision
        watch_id = await self._call(
            self._client.add_watch_prefix_callback, prefix, watch.on_response, **kwargs
        )
        watch._watch_id = watch_id
        return watch

    async def _cancel_watch(self, watch_id: Any) -> None:
        if self._closed:
            return
        await self._call(self._client.cancel_watch, watch_id)

    # ---- lifecycle

    async def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(Exception):
            await self._loop.run_in_executor(self._executor, self._client.close)
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> Etcd:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
