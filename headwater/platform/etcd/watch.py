"""Watches: :class:`Watch`, the async iterator of one prefix's changes.

Each watch is one etcd ``Watch`` stream (a grpc.aio call on the client's channel, on the event
loop), read by a task the watch owns into an unbounded queue and consumed by exactly one async
iterator. Started by :meth:`headwater.platform.etcd.Etcd.watch_prefix`, which has read the
stream's "created" answer before it returns the watch.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Literal

import grpc

from headwater.platform.etcd.errors import EtcdWatchError, wrap
from headwater.platform.etcd.etcdserverpb import rpc_pb2 as pb

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchEvent:
    kind: Literal["put", "delete"]
    key: str
    value: bytes  # empty for deletes
    mod_revision: int  # the revision of this change
    create_revision: int  # 0 for deletes


class Watch:
    """Async iterator of :class:`WatchEvent` for one prefix.

    Events arrive in etcd's order into an unbounded queue (metadata changes are few and
    small). When the stream ends for any reason other than :meth:`cancel` — broken
    connection, etcd restarted, the client closed, or etcd cancelling the watch because the
    revision it needs was compacted (:attr:`EtcdWatchError.compact_revision`) — iteration
    raises :class:`EtcdWatchError` after the events that came before; the caller re-reads and
    watches again. After :meth:`cancel` iteration stops (StopAsyncIteration).
    """

    _END = object()

    def __init__(self, prefix: str, call: Any) -> None:
        """``call``: the Watch stream, its "created" answer already read."""
        self.prefix = prefix
        self._call = call
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._done = False
        self._reader = asyncio.get_running_loop().create_task(
            self._read(), name=f"etcd-watch {prefix}"
        )

    async def _read(self) -> None:
        """The stream's answers into the queue; its end as an EtcdWatchError."""
        try:
            while (resp := await self._call.read()) is not grpc.aio.EOF:
                for e in resp.events:
                    self._queue.put_nowait(_event(e))
                if resp.compact_revision:
                    raise EtcdWatchError(
                        f"watch on {self.prefix!r} ended: revision compacted"
                        f" (etcd compacted up to {resp.compact_revision})",
                        compact_revision=int(resp.compact_revision),
                    )
                if resp.canceled:
                    raise EtcdWatchError(
                        f"watch on {self.prefix!r} cancelled by etcd: {resp.cancel_reason}"
                    )
            raise EtcdWatchError(f"watch on {self.prefix!r} ended: etcd closed the stream")
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # cancel(): the watch's own end
            # grpc.aio raises CancelledError for a call cancelled under it (channel closed)
            self._fail(EtcdWatchError(f"watch on {self.prefix!r} ended: stream cancelled"))
        except EtcdWatchError as exc:
            self._fail(exc)
        except Exception as exc:
            err = EtcdWatchError(f"watch on {self.prefix!r} ended: {wrap(exc)}")
            err.__cause__ = exc
            self._fail(err)

    def _fail(self, err: EtcdWatchError) -> None:
        log.info("%s", err)
        self._call.cancel()
        self._queue.put_nowait(err)

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
        """End the watch (its stream is cancelled, so etcd drops it); iteration then stops.
        Idempotent."""
        self._call.cancel()
        if not self._reader.done():
            self._reader.cancel()
            await asyncio.wait({self._reader})
        self._queue.put_nowait(Watch._END)

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cancel()


def _event(e: pb.Event) -> WatchEvent:
    if e.type == pb.Event.DELETE:
        return WatchEvent("delete", e.kv.key.decode(), b"", int(e.kv.mod_revision), 0)
    kv = e.kv
    return WatchEvent(
        "put", kv.key.decode(), bytes(kv.value), int(kv.mod_revision), int(kv.create_revision)
    )
