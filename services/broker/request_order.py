"""The order of a client's concurrent Produce requests (``ProduceRequest.order_*``, broker.proto).

gRPC handles calls that are in flight together in any order: each is its own task, a large
request is validated in a worker thread, and the interceptors await. Kafka's broker reads a
connection one request at a time, so a producer's batches are appended in the order it sent
them; a non-idempotent Headwater producer keeps that promise by numbering its requests to a
broker, and each request names the latest earlier one still unanswered (``order_after``).
:meth:`RequestOrder.wait_turn` holds a request, once validated, until that one has **passed**
(each of its entries has taken its place in its partition's first-come-first-served append
order, or failed: :meth:`RequestOrder.passed`), so two requests that carry the same partition
append in the client's order while the later one's validation overlaps the earlier append.
An idempotent producer does not need this: the partition's sequence check and its reorder
wait (:mod:`services.broker.partition`) order it.

Bounds (one request never costs more than a bounded wait and a little memory):

* a request waits at most :data:`ORDER_WAIT_S` (and never past its ``timeout_ms``); then it
  goes on as if its predecessor had passed (the predecessor was lost on the way, or the
  broker forgot the key: nothing worse than the unordered behaviour happens);
* at most :data:`MAX_WAITING_PER_KEY` requests of one key and :data:`MAX_WAITING` in all wait
  at once; a request past either is not held;
* at most :data:`MAX_KEYS` keys are remembered, least recently used first out (never one with
  a waiting request). A key costs about 250 bytes, some 16 MiB at the limit. A forgotten key
  that comes back makes its next waiting request wait out the bound once.

Ownership: one instance per broker, used only on the broker's event loop.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from headwater import timeouts
from services.broker import metrics

#: Longest wait of a request for its predecessor.
ORDER_WAIT_S = 1.0
#: Requests of one key that may wait at once (a producer keeps at most 5 in flight).
MAX_WAITING_PER_KEY = 8
#: Requests that may wait at once, all keys together.
MAX_WAITING = 1024
#: Keys remembered (least recently used forgotten first).
MAX_KEYS = 65_536


class _Key:
    """One client's numbered requests to this broker."""

    __slots__ = ("passed", "waiters")

    def __init__(self) -> None:
        #: the highest order_number that has passed
        self.passed = 0
        #: order_number awaited -> the futures of the requests waiting for it
        self.waiters: dict[int, list[asyncio.Future[None]]] = {}


class RequestOrder:
    """See the module docstring."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._keys: OrderedDict[int, _Key] = OrderedDict()
        self._max_keys = max_keys
        self._waiting = 0
        #: see :data:`ORDER_WAIT_S` (an attribute so a test can lengthen it)
        self.wait_s = ORDER_WAIT_S

    @property
    def waiting(self) -> int:
        """Requests waiting now."""
        return self._waiting

    def __len__(self) -> int:
        return len(self._keys)

    def _key(self, key: int) -> _Key:
        found = self._keys.get(key)
        if found is not None:
            self._keys.move_to_end(key)
            return found
        if len(self._keys) >= self._max_keys:
            self._forget_one()
        made = self._keys[key] = _Key()
        return made

    def _forget_one(self) -> None:
        """Forget the least recently used key that no request waits on (at most MAX_WAITING
        keys have waiters, so the scan is bounded)."""
        for key, state in self._keys.items():
            if not state.waiters:
                del self._keys[key]
                return

    def must_wait(self, key: int, after: int) -> bool:
        """Whether :meth:`wait_turn` would wait now (request ``after`` of ``key`` has not
        passed): the caller starts the wait only then."""
        if after == 0:
            return False
        state = self._keys.get(key)
        return state is None or state.passed < after

    async def wait_turn(self, key: int, after: int, timeout_s: float) -> None:
        """Return once request ``after`` of ``key`` has passed, or at the bound (see the
        module docstring); at once for ``after == 0`` or when the waiting limits are
        reached."""
        if after == 0:
            return
        state = self._key(key)
        if state.passed >= after:
            return
        if (
            self._waiting >= MAX_WAITING
            or sum(map(len, state.waiters.values())) >= MAX_WAITING_PER_KEY
        ):
            return
        metrics.PRODUCE_ORDER_WAITS.inc()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        state.waiters.setdefault(after, []).append(fut)
        self._waiting += 1
        try:
            await timeouts.wait_for(fut, max(0.0, min(self.wait_s, timeout_s)))
        except TimeoutError:
            metrics.PRODUCE_ORDER_WAIT_TIMEOUTS.inc()
        finally:
            self._waiting -= 1
            futs = state.waiters.get(after)
            if futs is not None:
                if fut in futs:
                    futs.remove(fut)
                if not futs:
                    del state.waiters[after]

    def passed(self, key: int, number: int) -> None:
        """Request ``number`` of ``key`` has appended (or failed) every entry: wake the
        requests waiting for it or for an earlier one. Calling it again is harmless."""
        state = self._key(key)
        if number <= state.passed:
            return
        state.passed = number
        for awaited in [n for n in state.waiters if n <= number]:
            for fut in state.waiters.pop(awaited):
                if not fut.done():
                    fut.set_result(None)
