"""The etcd client: :class:`Etcd`, connection and key/value, transaction, lease and watch calls.

Every call is a grpc.aio call of etcd's v3 API (:mod:`headwater.platform.etcd.etcdserverpb`) on
the client's one channel, on the event loop that connected: no thread hand-over, no executor.
Each unary call carries a gRPC deadline of the client's ``timeout``. A failed call never puts
etcd aside: the next call tries it again, and the channel reconnects by itself with its
back-off capped at :data:`MAX_RECONNECT_BACKOFF_MS` (an outage ends for every client within
about that long after etcd answers again). Leases are kept alive by
:mod:`headwater.platform.etcd.lease` (a thread per lease, on a synchronous channel of the
client's), watches delivered by :mod:`headwater.platform.etcd.watch`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc

from headwater import timeouts
from headwater.platform.etcd.errors import EtcdError, EtcdWatchError, wrap
from headwater.platform.etcd.etcdserverpb import rpc_pb2 as pb
from headwater.platform.etcd.etcdserverpb import rpc_pb2_grpc as pb_grpc
from headwater.platform.etcd.kv import (
    Compare,
    KeyMeta,
    Op,
    PrefixSnapshot,
    TxnResult,
    delete_request,
    key_meta,
    key_values,
    prefix_end,
    range_request,
    to_bytes,
    to_pb_compare,
    to_pb_op,
    txn_result,
)
from headwater.platform.etcd.lease import LeaseKeeper, lease_id_of
from headwater.platform.etcd.watch import Watch

T = TypeVar("T")

#: Default deadline for one etcd RPC (seconds).
DEFAULT_RPC_TIMEOUT = 5.0
#: Longest wait between two attempts of the channel to reconnect to etcd (gRPC's default,
#: 120 s, would leave a client cut off for up to two minutes after a long etcd outage ended).
MAX_RECONNECT_BACKOFF_MS = 2000
#: Largest etcd answer accepted (a prefix read of a large cluster's metadata; gRPC's default
#: is 4 MiB).
MAX_RECEIVE_BYTES = 64 * 1024 * 1024

_CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
)


def _read_pems(
    ca: str, cert: str | None, key: str | None
) -> tuple[bytes, bytes | None, bytes | None]:
    def read(path: str | None) -> bytes | None:
        return None if path is None else Path(path).read_bytes()

    return Path(ca).read_bytes(), read(key), read(cert)


def _cancelled_by_caller() -> bool:
    """Whether the running task is being cancelled (grpc.aio also raises CancelledError for
    a call cancelled under it, e.g. by :meth:`Etcd.close`: that is an etcd error instead)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Etcd:
    """Async etcd client. Create with :meth:`connect`; close with :meth:`close`.

    Safe to use from one event loop (the one that called :meth:`connect`); the methods may be
    awaited concurrently (calls are multiplexed on one HTTP/2 connection).
    """

    def __init__(
        self, endpoint: str, timeout: float, credentials: grpc.ChannelCredentials | None
    ) -> None:
        self.endpoint = endpoint
        self._timeout = timeout
        self._credentials = credentials
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(endpoint, options=_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.aio.secure_channel(endpoint, credentials, options=_CHANNEL_OPTIONS)
        self._kv = pb_grpc.KVStub(self._channel)
        self._watch = pb_grpc.WatchStub(self._channel)
        self._lease = pb_grpc.LeaseStub(self._channel)
        self._maintenance = pb_grpc.MaintenanceStub(self._channel)
        # the keepalive threads' channel, opened at the first lease
        self._sync_channel: grpc.Channel | None = None
        self._sync_lease: Any = None
        self._closed = False

    @classmethod
    async def connect(
        cls,
        endpoint: str,
        *,
        timeout: float = DEFAULT_RPC_TIMEOUT,
        ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
    ) -> Etcd:
        """Connect to ``"host:port"`` and check the server answers (raises EtcdError).

        ``ca`` (PEM path) turns TLS on and verifies etcd's certificate; ``cert``/``key`` add a
        client certificate (etcd's ``--client-cert-auth``). A certificate without ``ca`` or
        without its key raises EtcdError. ``timeout``: the deadline of each RPC (seconds).
        """
        if (cert is None) != (key is None) or (cert is not None and ca is None):
            raise EtcdError("etcd TLS: cert and key go together, and need ca")
        host, _, port_text = endpoint.rpartition(":")
        if not host or not port_text.isdigit():
            raise EtcdError(f"bad etcd endpoint {endpoint!r}; expected HOST:PORT")
        credentials = None
        if ca is not None:
            try:
                root, private_key, chain = await asyncio.to_thread(_read_pems, ca, cert, key)
            except OSError as exc:
                raise wrap(exc) from exc
            credentials = grpc.ssl_channel_credentials(root, private_key, chain)
        self = cls(endpoint, timeout, credentials)
        try:
            await self._call(self._maintenance.Status, pb.StatusRequest())
        except BaseException:
            await self.close()
            raise
        return self

    async def _call(self, method: Callable[..., Awaitable[T]], request: Any) -> T:
        """One unary RPC with the client's deadline; failures as EtcdError."""
        if self._closed:
            raise EtcdError("etcd client is closed")
        try:
            return await method(request, timeout=self._timeout)
        except asyncio.CancelledError as exc:
            if _cancelled_by_caller():
                raise
            raise EtcdError("etcd call cancelled (client closed)") from exc
        except Exception as exc:
            raise wrap(exc) from exc

    # ---- key/value

    async def get(self, key: str) -> tuple[bytes, KeyMeta] | None:
        resp = await self._call(self._kv.Range, range_request(key, prefix=False))
        if not resp.kvs:
            return None
        kv = resp.kvs[0]
        return bytes(kv.value), key_meta(kv)

    async def get_prefix(self, prefix: str) -> PrefixSnapshot:
        resp = await self._call(self._kv.Range, range_request(prefix, prefix=True))
        return PrefixSnapshot(int(resp.header.revision), key_values(resp.kvs))

    async def put(
        self, key: str, value: str | bytes, *, lease: LeaseKeeper | int | None = None
    ) -> int:
        """Write ``key``; returns the store revision of the write."""
        request = pb.PutRequest(
            key=key.encode(), value=to_bytes(value), lease=lease_id_of(lease) or 0
        )
        resp = await self._call(self._kv.Put, request)
        return int(resp.header.revision)

    async def delete(self, key: str) -> bool:
        """Delete ``key``; True when it existed."""
        resp = await self._call(self._kv.DeleteRange, delete_request(key, prefix=False))
        return int(resp.deleted) > 0

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix``; returns how many were deleted."""
        resp = await self._call(self._kv.DeleteRange, delete_request(prefix, prefix=True))
        return int(resp.deleted)

    async def txn(
        self, compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """One atomic etcd transaction: if every comparison holds run ``success``, else
        ``failure``."""
        request = pb.TxnRequest(
            compare=[to_pb_compare(c) for c in compare],
            success=[to_pb_op(o) for o in success],
            failure=[to_pb_op(o) for o in failure],
        )
        return txn_result(await self._call(self._kv.Txn, request))

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
        resp = await self._call(self._lease.LeaseGrant, pb.LeaseGrantRequest(TTL=ttl))
        if resp.error:
            raise EtcdError(f"etcd refused a lease of {ttl} s: {resp.error}")
        if self._sync_channel is None:
            if self._credentials is None:
                channel = grpc.insecure_channel(self.endpoint, options=_CHANNEL_OPTIONS)
            else:
                channel = grpc.secure_channel(self.endpoint, self._credentials, _CHANNEL_OPTIONS)
            self._sync_channel = channel
            self._sync_lease = pb_grpc.LeaseStub(channel)
        keeper = LeaseKeeper(
            int(resp.ID),
            int(resp.TTL),
            on_lost,
            refresh=self._keepalive_once,
            revoke=self.revoke_lease,
        )
        keeper.start(name)
        return keeper

    def _keepalive_once(self, lease_id: int, timeout: float) -> int:
        """One ``LeaseKeepAlive`` round trip, blocking (a keeper's thread): the lease's
        remaining TTL (0: etcd no longer has it)."""
        stub = self._sync_lease
        if self._closed or stub is None:
            raise EtcdError("etcd client is closed")
        responses = stub.LeaseKeepAlive(
            iter([pb.LeaseKeepAliveRequest(ID=lease_id)]), timeout=timeout
        )
        try:
            for resp in responses:
                return int(resp.TTL)
            return 0
        finally:
            responses.cancel()

    async def lease_granted_ttl(self, lease_id: int) -> int:
        """The TTL a lease was granted with (-1 when it no longer exists)."""
        info = await self._call(self._lease.LeaseTimeToLive, pb.LeaseTimeToLiveRequest(ID=lease_id))
        return int(info.grantedTTL) if int(info.TTL) >= 0 else -1

    async def revoke_lease(self, lease_id: int) -> None:
        """Revoke a lease by id (its keys are deleted at once, as on expiry; the holder's
        keepalive then reports the lease lost). :meth:`LeaseKeeper.revoke` calls this."""
        await self._call(self._lease.LeaseRevoke, pb.LeaseRevokeRequest(ID=lease_id))

    # ---- watches

    async def watch_prefix(self, prefix: str, *, start_revision: int | None = None) -> Watch:
        """Start watching every key under ``prefix``; iterate the result for events.

        With ``start_revision`` the watch replays changes since that revision first (a
        revision etcd has compacted away makes the iteration raise :class:`EtcdWatchError`
        with its ``compact_revision``). Returns once etcd has created the watch.
        """
        if self._closed:
            raise EtcdError("etcd client is closed")
        create = pb.WatchCreateRequest(
            key=prefix.encode(), range_end=prefix_end(prefix), start_revision=start_revision or 0
        )
        call = self._watch.Watch()
        try:
            await timeouts.wait_for(_create_watch(call, prefix, create), self._timeout)
        except asyncio.CancelledError as exc:
            call.cancel()
            if _cancelled_by_caller():
                raise
            raise EtcdError("etcd watch cancelled (client closed)") from exc
        except Exception as exc:
            call.cancel()
            raise wrap(exc) from exc
        return Watch(prefix, call)

    # ---- lifecycle

    async def close(self) -> None:
        """Close the channels: calls in flight fail with EtcdError, watches end with
        :class:`EtcdWatchError`, and lease keepers can no longer refresh (stop or revoke
        them first). Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._channel.close()
        if self._sync_channel is not None:
            self._sync_channel.close()

    async def __aenter__(self) -> Etcd:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _create_watch(call: Any, prefix: str, create: pb.WatchCreateRequest) -> None:
    """Send a Watch stream's create request and read etcd's answer (raises EtcdWatchError
    when etcd did not create the watch)."""
    await call.write(pb.WatchRequest(create_request=create))
    first = await call.read()
    if first is grpc.aio.EOF:
        raise EtcdWatchError(f"watch on {prefix!r}: etcd closed the stream before creating it")
    if first.compact_revision:
        raise EtcdWatchError(
            f"watch on {prefix!r}: revision {create.start_revision} compacted"
            f" (etcd compacted up to {first.compact_revision})",
            compact_revision=int(first.compact_revision),
        )
    if not first.created or first.canceled:
        raise EtcdWatchError(f"watch on {prefix!r} refused by etcd: {first.cancel_reason}")
