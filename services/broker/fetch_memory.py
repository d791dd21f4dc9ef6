"""A bound on the record bytes consumer fetch streams hold in memory: read from the log and not
yet handed to gRPC flow control.

Each ``Broker.Fetch`` stream reads up to ``max_bytes`` per response and then waits until the
response is written; gRPC flow control makes that wait last as long as the client does not
read. Without a bound, many streams (or many connections) of a large partition hold one
response each — 300 streams of 1 MiB responses grew a broker by over a gigabyte (the hostile
input table, docs/security.md). :class:`FetchMemory` bounds it twice:

* **per connection** (``per_connection`` bytes, keyed by the gRPC peer): a client that stalls
  its streams, or opens hundreds of them, only ever pins this much;
* **per broker** (``total`` bytes): many connections together wait for each other rather than
  grow the heap.

Contract for a stream: ``grant = await acquire(peer, wanted)`` before a read (``grant`` is
``min(wanted, per_connection)`` bytes, at least 1 — the read must not ask for more, except
that a single batch larger than the grant is still read whole, and accounted as read), then
``settle(peer, grant, used)`` right after it (giving back what the read did not use), and
``release(peer, used)`` once the response carrying those bytes has been written (or the
stream ended). Waiting is FIFO-fair enough for this purpose: every release wakes all waiters,
which re-check. Owned by the broker's event loop (no locks; not thread-safe).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

DEFAULT_TOTAL_BYTES = 128 * 1024 * 1024
DEFAULT_PER_CONNECTION_BYTES = 8 * 1024 * 1024


class FetchMemory:
    """See the module docstring."""

    def __init__(
        self,
        total: int = DEFAULT_TOTAL_BYTES,
        per_connection: int = DEFAULT_PER_CONNECTION_BYTES,
    ) -> None:
        if total < 1 or per_connection < 1:
            raise ValueError("fetch memory bounds must be positive")
        self.total = total
        self.per_connection = min(per_connection, total)
        self.used = 0
        self._by_peer: dict[str, int] = defaultdict(int)
        self._changed = asyncio.Event()

    def held_by(self, peer: str) -> int:
        return self._by_peer.get(peer, 0)

    async def acquire(self, peer: str, wanted: int) -> int:
        """Wait until ``min(wanted, per_connection)`` bytes fit both bounds; take them."""
        grant = max(1, min(wanted, self.per_connection))
        while self.used + grant > self.total or self._by_peer[peer] + grant > self.per_connection:
            event = self._changed
            await event.wait()
        self.used += grant
        self._by_peer[peer] += grant
        return grant

    def settle(self, peer: str, grant: int, used: int) -> None:
        """After the read: keep ``used`` bytes of ``grant`` (more when one batch was bigger)."""
        delta = used - grant
        self.used += delta
        self._by_peer[peer] += delta
        if delta < 0:
            self._wake()

    def release(self, peer: str, nbytes: int) -> None:
        if nbytes <= 0:
            return
        self.used -= nbytes
        left = self._by_peer[peer] - nbytes
        if left > 0:
            self._by_peer[peer] = left
        else:
            self._by_peer.pop(peer, None)
        self._wake()

    def _wake(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()
