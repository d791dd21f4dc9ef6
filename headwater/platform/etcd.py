"""The one adapter around pyetcd: an asyncio facade over the blocking etcd v3 client.

Nothing else in Headwater imports ``pyetcd``. Callers use :class:`Etcd` and the small builder
helpers below (``cmp_*`` comparisons and ``op_*`` operations for :meth:`Etcd.txn`).

Threads and ownership:

* Every blocking pyetcd call runs in the adapter's own ``ThreadPoolExecutor`` (never on the
  event loop, never in the loop's default executor, so a slow etcd cannot starve
  ``asyncio.to_thread`` users such as storage I/O).
* Watches are served by pyetcd's watch thread; each event is handed to the loop with
  ``loop.call_soon_threadsafe`` and consumed by exactly one async iterator (:class:`Watch`).
* A :class:`LeaseKeeper` owns one named keepalive thread (not a task on the loop: a handler
  holding the loop for a while must not cost the process its lease); the lease's loss
  (refresh answered with TTL 0, or no successful refresh for a whole TTL) is reported once,
  on the loop, through the ``lost`` event and the optional ``on_lost`` callback. A loop that
  has not run for :data:`LOOP_STALL_LIMIT_S` is taken for wedged: the keeper stops
  refreshing, so the lease expires and another process can take over what it guarded.

Keys are ``str``; values are returned as ``bytes`` (``put`` accepts ``str`` or ``bytes``).
Every pyetcd/gRPC failure surfaces as :class:`EtcdError` (or a subclass) with the original
exception chained as ``__cause__``. A failed call never puts etcd aside: the next call tries
it again (an outage ends for every client as soon as etcd answers again).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import grpc
import pyetcd
import pyetcd.exceptions

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Default deadline for one etcd RPC (seconds).
DEFAULT_RPC_TIMEOUT = 5.0
#: Delay before the next lease refresh after a failed one (seconds; normally ttl / 3).
RETRY_REFRESH_S = 0.5
#: A keepalive thread stops refreshing when its event loop has not run for this long.
LOOP_STALL_LIMIT_S = 30.0


class EtcdError(Exception):
    """An etcd operation failed. ``__cause__`` holds the pyetcd/gRPC exception."""


class EtcdUnavailableError(EtcdError):
    """etcd could not be reached or did not answer in time (retriable)."""


class EtcdWatchError(EtcdError):
    """A watch ended (stream broken or revision compacted); re-read and watch again."""


class LeaseLostError(EtcdError):
    """The lease expired or was revoked; keys attached to it are gone."""


# --------------------------------------------------------------------------- value types


@dataclass(frozen=True)
class KeyMeta:
    """etcd's bookkeeping for one key."""

    create_revision: int
    mod_revision: int
    version: int
    lease_id: int = 0


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    meta: KeyMeta


@dataclass(frozen=True)
class PrefixSnapshot:
    """Every key under a prefix (sorted by key) as of store ``revision``.

    Watching with ``start_revision=revision + 1`` continues without a gap.
    """

    revision: int
    items: list[KeyValue]


@dataclass(frozen=True)
class WatchEvent:
    kind: Literal["put", "delete"]
    key: str
    value: bytes  # empty for deletes
    mod_revision: int  # the revision of this change
    create_revision: int  # 0 for deletes


@dataclass(frozen=True)
class TxnResult:
    """``succeeded``: whether the comparisons held. ``revision``: the store revision after a
    transaction that wrote something (0 otherwise). ``responses``: one entry per executed
    operation — a list of :class:`KeyValue` for ``op_get``, the number of deleted keys for
    ``op_delete``/``op_delete_prefix``, None for ``op_put``."""

    succeeded: bool
    revision: int
    responses: list[list[KeyValue] | int | None]


# --------------------------------------------------------------------------- txn builders

_CmpTarget = Literal["value", "version", "mod", "create"]
_CmpOp = Literal["==", "!=", "<", ">"]


@dataclass(frozen=True)
class Compare:
    key: str
    target: _CmpTarget
    op: _CmpOp
    operand: int | str | bytes


def cmp_value(key: str, op: _CmpOp, value: str | bytes) -> Compare:
    return Compare(key, "value", op, value)


def cmp_version(key: str, op: _CmpOp, version: int) -> Compare:
    """``cmp_version(k, "==", 0)``: the key does not exist."""
    return Compare(key, "version", op, version)


def cmp_mod(key: str, op: _CmpOp, revision: int) -> Compare:
    return Compare(key, "mod", op, revision)


def cmp_create(key: str, op: _CmpOp, revision: int) -> Compare:
    return Compare(key, "create", op, revision)


def cmp_absent(key: str) -> Compare:
    return cmp_version(key, "==", 0)


def cmp_exists(key: str) -> Compare:
    return cmp_version(key, ">", 0)


@dataclass(frozen=True)
class Op:
    kind: Literal["put", "delete", "delete_prefix", "get", "get_prefix"]
    key: str
    value: bytes = b""
    lease_id: int | None = None


def _b(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def op_put(key: str, value: str | bytes, lease: LeaseKeeper | int | None = None) -> Op:
    lease_id = lease.id if isinstance(lease, LeaseKeeper) else lease
    return Op("put", key, _b(value), lease_id)


def op_delete(key: str) -> Op:
    return Op("delete", key)


def op_delete_prefix(prefix: str) -> Op:
    return Op("delete_prefix", prefix)


def op_get(key: str) -> Op:
    return Op("get", key)


def op_get_prefix(prefix: str) -> Op:
    return Op("get_prefix", prefix)


def _prefix_end(prefix: str) -> bytes:
    s = bytearray(prefix.encode())
    for i in reversed(range(len(s))):
        if s[i] < 0xFF:
            s[i] += 1
            return bytes(s[: i + 1])
    return b"\0"


def _to_pyetcd_compare(client: Any, c: Compare) -> Any:
    t = client.transactions
    builder = {"value": t.value, "version": t.version, "mod": t.mod, "create": t.create}
    target = builder[c.target](c.key)
    operand = c.operand
    if c.op == "==":
        return target == operand
    if c.op == "!=":
        return target != operand
    if c.op == "<":
        return target < operand
    return target > operand


def _to_pyetcd_op(client: Any, o: Op) -> Any:
    t = client.transactions
    if o.kind == "put":
        return t.put(o.key, o.value, lease=o.lease_id)
    if o.kind == "delete":
        return t.delete(o.key)
    if o.kind == "delete_prefix":
        return t.delete(o.key, range_end=_prefix_end(o.key))
    if o.kind == "get":
        return t.get(o.key)
    return t.get(o.key, range_end=_prefix_end(o.key))


def _meta(kv: Any) -> KeyMeta:
    return KeyMeta(
        create_revision=int(kv.create_revision),
        mod_revision=int(kv.mod_revision),
        version=int(kv.version),
        lease_id=int(getattr(kv, "lease", 0) or getattr(kv, "lease_id", 0) or 0),
    )


def _wrap(exc: BaseException) -> EtcdError:
    if isinstance(exc, EtcdError):
        return exc
    unavailable = (
        pyetcd.exceptions.ConnectionFailedError,
        pyetcd.exceptions.ConnectionTimeoutError,
        pyetcd.exceptions.NoServerAvailableError,
    )
    if isinstance(exc, unavailable):
        err: EtcdError = EtcdUnavailableError(f"etcd unavailable: {exc}")
    elif isinstance(exc, grpc.RpcError) and exc.code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    ):
        err = EtcdUnavailableError(f"etcd unavailable: {exc.code()}")
    else:
        err = EtcdError(f"etcd error: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


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
            raise _wrap(exc) from exc
        return self

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise EtcdError("etcd client is closed")

        def run() -> T:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                raise _wrap(exc) from exc

        return await self._loop.run_in_executor(self._executor, run)

    # ---- key/value

    async def get(self, key: str) -> tuple[bytes, KeyMeta] | None:
        def run() -> tuple[bytes, KeyMeta] | None:
            resp = self._client.get_response(key)
            if not resp.kvs:
                return None
            kv = resp.kvs[0]
            return bytes(kv.value), _meta(kv)

        return await self._call(run)

    async def get_prefix(self, prefix: str) -> PrefixSnapshot:
        def run() -> PrefixSnapshot:
            resp = self._client.get_prefix_response(prefix, sort_order="ascend")
            items = [KeyValue(kv.key.decode(), bytes(kv.value), _meta(kv)) for kv in resp.kvs]
            return PrefixSnapshot(int(resp.header.revision), items)

        return await self._call(run)

    async def put(
        self, key: str, value: str | bytes, *, lease: LeaseKeeper | int | None = None
    ) -> int:
        """Write ``key``; returns the store revision of the write."""
        lease_id = lease.id if isinstance(lease, LeaseKeeper) else lease

        def run() -> int:
            resp = self._client.put(key, _b(value), lease=lease_id)
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
                compare=[_to_pyetcd_compare(c, x) for x in compare],
                success=[_to_pyetcd_op(c, x) for x in success],
                failure=[_to_pyetcd_op(c, x) for x in failure],
            )
            out: list[list[KeyValue] | int | None] = []
            revision = 0
            for r in responses:
                if isinstance(r, list):
                    out.append([KeyValue(m.key.decode(), bytes(v), _meta(m)) for v, m in r])
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
        keeper = LeaseKeeper(self, int(lease.id), int(lease.ttl), on_lost)
        keeper._start(name)
        return keeper

    async def lease_granted_ttl(self, lease_id: int) -> int:
        """The TTL a lease was granted with (-1 when it no longer exists)."""

        def run() -> int:
            info = self._client.get_lease_info(lease_id)
            return int(info.grantedTTL) if int(info.TTL) >= 0 else -1

        return int(await self._call(run))

    async def _revoke(self, lease_id: int) -> None:
        await self._call(self._client.revoke_lease, lease_id)

    async def revoke_lease(self, lease_id: int) -> None:
        """Revoke another holder's lease by id (its keys are deleted at once, as on expiry;
        the holder's keepalive then reports the lease lost)."""
        await self._revoke(lease_id)

    # ---- watches

    async def watch_prefix(self, prefix: str, *, start_revision: int | None = None) -> Watch:
        """Start watching every key under ``prefix``; iterate the result for events.

        With ``start_revision`` the watch replays changes since that revision first.
        """
        watch = Watch(self, prefix)
        kwargs: dict[str, Any] = {}
        if start_revision is not None:
            kwargs["start_revision"] = start_revision
        watch_id = await self._call(
            self._client.add_watch_prefix_callback, prefix, watch._on_response, **kwargs
        )
        watch._watch_id = watch_id
        return watch

    async def _cancel_watch(self, watch_id: Any) -> None:
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


class LeaseKeeper:
    """A granted lease plus the keepalive thread that keeps it alive.

    The thread (owned by this object, named) refreshes every ``ttl / 3`` seconds, through the
    adapter's executor, whatever the event loop is doing. Refresh failures are logged and
    retried after ``RETRY_REFRESH_S``; the lease is declared lost when etcd answers TTL 0 or
    when no refresh has succeeded for ``ttl`` seconds (by then etcd has expired it). The loss
    is reported on the loop. While the loop has not run for ``LOOP_STALL_LIMIT_S`` seconds the
    thread does not refresh (a wedged process gives its lease up).
    """

    def __init__(
        self, etcd: Etcd, lease_id: int, ttl: int, on_lost: Callable[[], None] | None
    ) -> None:
        self.id = lease_id
        self.ttl = ttl
        self.lost = asyncio.Event()
        self._etcd = etcd
        self._on_lost = on_lost
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._last_ok = time.monotonic()
        self._loop_seen = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _start(self, name: str) -> None:
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

        def run() -> int:
            responses = list(self._etcd._client.refresh_lease(self.id))
            return int(responses[-1].TTL) if responses else 0

        try:
            return self._etcd._executor.submit(run).result(timeout)
        except concurrent.futures.TimeoutError:
            raise EtcdError(f"lease refresh timed out after {timeout:.1f} s") from None
        except RuntimeError as exc:  # executor shut down: the client is closed
            raise EtcdError("etcd client is closed") from exc
        except Exception as exc:
            raise _wrap(exc) from exc

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
                await self._etcd._revoke(self.id)

    async def stop(self) -> None:
        """Stop refreshing without revoking (the lease then expires after its TTL)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            await asyncio.to_thread(thread.join)


class Watch:
    """Async iterator of :class:`WatchEvent` for one prefix.

    Events arrive from pyetcd's watch thread via ``call_soon_threadsafe`` into an unbounded
    queue (metadata changes are few and small). When the watch stream fails, iteration raises
    :class:`EtcdWatchError`; after :meth:`cancel` iteration stops.
    """

    _END = object()

    def __init__(self, etcd: Etcd, prefix: str) -> None:
        self.prefix = prefix
        self._etcd = etcd
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._watch_id: Any = None
        self._done = False

    def _on_response(self, response: Any) -> None:
        """Runs on pyetcd's watch thread."""
        if response is None or isinstance(response, BaseException):
            # pyetcd reports the end of the watch stream as an exception, or None when the
            # stream closed without one (client closing)
            err = EtcdWatchError(f"watch on {self.prefix!r} ended: {response!r}")
            err.__cause__ = response
            items: Iterable[Any] = [err]
        else:
            items = [_event(e) for e in response.events]
        for item in items:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchEvent:
        if self._done:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is Watch._END:
            self._done = True
            raise StopAsyncIteration
        if isinstance(item, EtcdWatchError):
            self._done = True
            raise item
        return item

    async def cancel(self) -> None:
        if self._watch_id is not None and not self._etcd._closed:
            with contextlib.suppress(EtcdError):
                await self._etcd._cancel_watch(self._watch_id)
        self._watch_id = None
        self._queue.put_nowait(Watch._END)

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cancel()


def _event(e: Any) -> WatchEvent:
    kind: Literal["put", "delete"] = "delete" if type(e).__name__ == "DeleteEvent" else "put"
    return WatchEvent(
        kind=kind,
        key=e.key.decode(),
        value=b"" if kind == "delete" else bytes(e.value),
        mod_revision=int(e.mod_revision),
        create_revision=0 if kind == "delete" else int(e.create_revision),
    )
