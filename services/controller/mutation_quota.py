"""Controller mutation rate (Kafka's KIP-599 ``controller_mutation_rate``, docs/quotas.md).

The quota key ``controller_mutation_rate`` (partitions per second, float > 0) lives on the
client / user / (user, client-id) entities in ``/headwater/configs/`` like the broker quota
keys, and is resolved the same way (:func:`headwater.config_entities.resolve_quotas`: most
specific entity first, ``<default>`` entities included). The active controller enforces it on
CreateTopics, CreatePartitions and DeleteTopics, counting partitions created or deleted.

Measurement is a token bucket per quota group (Kafka's ``TokenBucket``): it holds at most
``rate * BURST_S`` tokens (Kafka's default burst: 11 one-second windows), refills at ``rate``
per second and starts full. A mutation of ``n`` partitions is admitted while the bucket is not
negative and then takes ``n`` tokens (so one large topic is never refused for ever: the bucket
may go negative); while it is negative every mutation is refused with
THROTTLING_QUOTA_EXCEEDED and nothing is written. The throttle time is how long until the
bucket is back at zero. validate_only requests are not counted.

The quota group (who shares a bucket) is the one of the matching entry, as for the broker's
quotas: a user-level entry by the user, a client-level entry by the client id, the others by
the (user, client-id) pair; a ``<default>`` entry gives each its own bucket.

Configs are read from etcd (one transaction of the eight entity keys of the precedence chain)
per (user, client-id) and cached for :data:`CACHE_S`; AlterConfigs of a client or user entity on
this controller clears the cache, so a change made through it applies to the next mutation.
Buckets are in memory: a newly active controller starts with full buckets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from headwater import config_entities as ce
from headwater import errors
from headwater.platform import etcd as hetcd

KEY = "controller_mutation_rate"
#: Burst, in seconds of the rate (Kafka: quota.window.num 11 x quota.window.size.seconds 1).
BURST_S = 11.0
#: How long a (user, client-id)'s resolved quota is reused without reading etcd again.
CACHE_S = 1.0
#: Buckets unused this long are forgotten (they would be full again by then anyway).
IDLE_S = 600.0


class TokenBucket:
    """Tokens = partitions that may still be mutated; see the module docstring."""

    def __init__(self, rate: float, now: float, burst_s: float = BURST_S) -> None:
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"rate must be a finite number > 0, got {rate}")
        self.rate = rate
        self.burst_s = burst_s
        self.tokens = rate * burst_s
        self.last = now

    def set_rate(self, rate: float, now: float) -> None:
        """A new quota: keep the tokens (capped at the new burst)."""
        self._refill(now)
        self.rate = rate
        self.tokens = min(self.tokens, rate * self.burst_s)

    def _refill(self, now: float) -> None:
        if now > self.last:
            self.tokens = min(self.rate * self.burst_s, self.tokens + (now - self.last) * self.rate)
            self.last = now

    def try_take(self, n: int, now: float) -> bool:
        """Admit a mutation of ``n`` partitions (True, tokens taken) unless the bucket is
        negative (False, nothing taken)."""
        self._refill(now)
        if self.tokens < 0:
            return False
        self.tokens -= n
        return True

    def throttle_s(self, now: float) -> float:
        """Seconds until the bucket is back at zero (0 when it is not negative)."""
        self._refill(now)
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


@dataclass
class Gate:
    """The mutation quota of one request: ``admit(n)`` per topic, then ``throttle_ms()`` for
    the response. ``bucket`` None: no quota applies (everything admitted)."""

    bucket: TokenBucket | None
    who: str
    clock: Callable[[], float] = time.monotonic

    def admit(self, partitions: int) -> None:
        """Take ``partitions`` tokens or raise ThrottlingQuotaExceededError (nothing taken)."""
        if self.bucket is None or self.bucket.try_take(partitions, self.clock()):
            return
        wait = self.bucket.throttle_s(self.clock())
        raise errors.ThrottlingQuotaExceededError(
            f"controller mutation rate of {self.who} ({self.bucket.rate:g} partitions/s)"
            f" exceeded; retry in {wait * 1000:.0f} ms"
        )

    def throttle_ms(self) -> int:
        if self.bucket is None:
            return 0
        return min(2**31 - 1, math.ceil(self.bucket.throttle_s(self.clock()) * 1000))


class MutationQuotas:
    """The controller's buckets and quota cache (one owner: the controller's event loop)."""

    def __init__(self, etcd: hetcd.Etcd, clock: Callable[[], float] = time.monotonic) -> None:
        self._etcd = etcd
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, tuple[float, str, str] | None]] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def invalidate(self) -> None:
        """Forget every cached quota (a client or user entity changed)."""
        self._cache.clear()

    async def _resolve(self, user: str, client_id: str) -> tuple[float, str, str] | None:
        """(rate, group user, group client-id) of the entry that applies, or None."""
        now = self._clock()
        hit = self._cache.get((user, client_id))
        if hit is not None and now - hit[0] < CACHE_S:
            return hit[1]
        chain = ce.quota_chain(user, client_id)
        got = await self._etcd.txn([], [hetcd.op_get(e.key) for e in chain])
        configs: dict[ce.Entity, dict[str, str]] = {}
        for ent, kvs in zip(chain, got.responses, strict=True):
            if isinstance(kvs, list) and kvs:
                try:
                    values = ce.decode_configs(kvs[0].value)
                except ValueError:
                    continue  # malformed by hand: ignored, as the brokers do
                configs[ent] = {k: v for k, v in values.items() if k == KEY}
        found = ce.resolve_quotas(configs, user, client_id).get(KEY)
        out: tuple[float, str, str] | None = None
        if found is not None:
            try:
                rate = float(found[0])
            except ValueError:
                rate = -1.0
            if rate > 0 and math.isfinite(rate):
                out = (rate, *_tags(found[1], user, client_id))
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[(user, client_id)] = (now, out)
        return out

    async def gate(self, user: str, client_id: str) -> Gate:
        """The gate of one request of ``(user, client_id)``."""
        resolved = await self._resolve(user, client_id)
        who = f"user {user!r} client {client_id!r}"
        if resolved is None:
            return Gate(None, who, self._clock)
        rate, g_user, g_client = resolved
        now = self._clock()
        self._forget_idle(now)
        bucket = self._buckets.get((g_user, g_client))
        if bucket is None:
            bucket = self._buckets[(g_user, g_client)] = TokenBucket(rate, now)
        elif bucket.rate != rate:
            bucket.set_rate(rate, now)
        return Gate(bucket, who, self._clock)

    def _forget_idle(self, now: float) -> None:
        if len(self._buckets) < 1000:
            return
        for key, b in list(self._buckets.items()):
            if now - b.last > IDLE_S:
                del self._buckets[key]


def _tags(entity: ce.Entity, user: str, client_id: str) -> tuple[str, str]:
    """The quota group an entry of the chain stands for (docs/quotas.md, Precedence)."""
    if entity.kind == "client":
        return "", client_id
    if entity.client_id is None:
        return user, ""
    return user, client_id
