"""Watches: :class:`Watch`, the async iterator of one prefix's changes.

Watches are served by pyetcd's watch thread; each event is handed to the loop with
``loop.call_soon_threadsafe`` and consumed by exactly one async iterator. Started by
:meth:`headwater.platform.etcd.Etcd.watch_prefix`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from headwater.platform.etcd.errors import EtcdError, EtcdWatchError


@dataclass(frozen=True)
class WatchEvent:
    kind: Literal["put", "delete"]
    key: str
    value: bytes  # empty for deletes
    mod_revision: int  # the revision of this change
    create_revision: int  # 0 for deletes


class Watch:
    """Async iterator of :class:`WatchEvent` for one prefix.

    Events arrive from pyetcd's watch thread via ``call_soon_threadsafe`` into an unbounded
    queue (metadata changes are few and small). When the watch stream fails, iteration raises
    :class:`EtcdWatchError`; after :meth:`cancel` iteration stops. ``cancel_watch(watch_id)``
    is the adapter's call that ends the watch in etcd.
    """

    _END = object()

    def __init__(self, prefix: str, cancel_watch: Callable[[Any], Awaitable[None]]) -> None:
        self.prefix = prefix
        self._cancel_watch = cancel_watch
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._watch_id: Any = None
        self._done = False

    def on_response(self, response: Any) -> None:
        """pyetcd's watch callback; runs on pyetcd's watch thread."""
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
        if self._watch_id is not None:
            with contextlib.suppress(EtcdError):
                await self._cancel_watch(self._watch_id)
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
