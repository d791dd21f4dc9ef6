"""Per-link TCP proxies for link faults: ``cut()``, ``hang()``, ``heal()``.

A :class:`LinkProxy` listens on ``127.0.0.1:<port picked at run time>`` and forwards each
accepted connection to its target, resolved *when the connection is accepted* (a callable, so
a restarted broker on a new port is followed). Link states:

* ``open``  — bytes flow both ways;
* ``cut``   — every connection is aborted (RST) and new ones are accepted and aborted at once
  (the peer sees "connection reset" immediately: a crashed switch port);
* ``hung``  — connections stay established but no byte is forwarded in either direction,
  new ones are accepted and held (a partition without RST: the peer only notices through
  its own timeouts). ``heal()`` releases what was held;
* ``deaf``  — bytes toward the target flow, bytes back from it are discarded (counted in
  ``dropped``): requests land, their answers are lost — the case that makes a client retry
  something that already happened.

All proxies of a :class:`ProxyHub` run on one asyncio loop in one background thread (the
proxies' state is owned by that loop); the control methods are thread-safe and return once
the change is in effect, so a test may call them from anywhere, including its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Literal

State = Literal["open", "cut", "hung", "deaf"]
Target = Callable[[], tuple[str, int] | None]
CHUNK = 64 * 1024


class LinkProxy:
    """One proxied link (see module doc). Create through :meth:`ProxyHub.link`."""

    def __init__(self, hub: ProxyHub, name: str, target: Target) -> None:
        self.hub = hub
        self.name = name
        self.target = target
        self.port = 0
        self.state: State = "open"
        self.accepted = 0
        self.dropped = 0  # bytes from the target discarded while deaf
        self._open: asyncio.Event  # created on the hub's loop by _create
        self._conns: set[asyncio.StreamWriter] = set()
        self._server: asyncio.base_events.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __repr__(self) -> str:
        return f"LinkProxy({self.name} {self.address} {self.state})"

    # ---- control (any thread)

    def cut(self) -> None:
        self.hub.call(self._set("cut"))

    def hang(self) -> None:
        self.hub.call(self._set("hung"))

    def deafen(self) -> None:
        self.hub.call(self._set("deaf"))

    def heal(self) -> None:
        self.hub.call(self._set("open"))

    # ---- on the hub's loop

    async def _set(self, state: State) -> None:
        self.state = state
        if state in ("open", "deaf"):
            self._open.set()
        else:
            self._open.clear()
        if state == "cut":
            for w in list(self._conns):
                _abort(w)
            self._conns.clear()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._conns):
            _abort(w)
        self._conns.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.state == "cut":
            _abort(writer)
            return
        self._conns.add(writer)
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self._open.wait()  # a hung link holds new connections here
            target = self.target()
            if target is None or self.state == "cut" or writer not in self._conns:
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*target)
            except OSError:
                return
            self._conns.add(up_writer)
            await asyncio.gather(
                self._pump(reader, up_writer),
                self._pump(up_reader, writer, downstream=True),
                return_exceptions=True,
            )
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    self._conns.discard(w)
                    _abort(w)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, downstream: bool = False
    ) -> None:
        try:
            while True:
                data = await src.read(CHUNK)
                if not data:
                    return
                await self._open.wait()  # hung: hold the bytes, stop reading (back-pressure)
                if dst not in self._conns:
                    return  # cut meanwhile
                if downstream and self.state == "deaf":
                    self.dropped += len(data)
                    continue
                dst.write(data)
                await dst.drain()
        finally:
            _abort(dst)


def _abort(w: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        w.transport.abort()


class ProxyHub:
    """A background thread running the loop of all its proxies. ``close()`` stops it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.links: dict[str, LinkProxy] = {}
        self._thread = threading.Thread(target=self.loop.run_forever, name="proxy-hub", daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, None], timeout: float = 10.0) -> None:
        """Run ``coro`` on the hub's loop and wait for it."""
        asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def link(self, name: str, target: Target) -> LinkProxy:
        """A new proxy called ``name`` forwarding to ``target()`` (started, port known)."""
        proxy = LinkProxy(self, name, target)
        self.call(_create(proxy))
        self.links[name] = proxy
        return proxy

    def heal_all(self) -> None:
        for p in self.links.values():
            p.heal()

    def close(self) -> None:
        for p in self.links.values():
            self.call(p._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def __enter__(self) -> ProxyHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _create(proxy: LinkProxy) -> None:
    # the Event must belong to the hub's loop
    proxy._open = asyncio.Event()
    proxy._open.set()
    await proxy._start()
