"""The broker's quota manager: measures each client group's rates, computes throttle delays
and holds throttled clients (seed §4.9, docs/quotas.md).

Three quota types, each with its own config key and sensor:

* ``produce``: record bytes of each Produce request vs ``producer_byte_rate`` (bytes/s);
* ``fetch``: record bytes of each Fetch response vs ``consumer_byte_rate`` (bytes/s);
* ``request``: handling time of each client request vs ``request_percentage`` (percent of one
  thread's time; a request running 5 ms records 0.5 percent-seconds).

Sensors are keyed by ``(type, quota group)``: the group is the matched entry's tags
(:class:`services.broker.quotas.entities.Match`), so every client of a shared quota adds to
one measurement; a client with no quota is measured alone (tags ``(user, client_id)``) and
never throttled. After recording, a group over its quota gets the delay of
:func:`services.broker.quotas.rate.throttle_for`; the manager returns it (the response's
``throttle_time_ms``) and *holds* the request's own ``(user, client_id)`` for that type:
:meth:`QuotaManager.wait` blocks its next requests on this broker until the delay has passed,
so a client that ignores throttle time is held to the quota all the same. A request is also
not admitted while its group is over the quota (other clients of a shared quota pushed it
there), so a shared quota overshoots by at most about one request.

Ownership: one instance per broker, used only on the broker's event loop. Changing the
window settings restarts every measurement.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from services.broker import metrics
from services.broker.quotas import entities
from services.broker.quotas.rate import SampledRate, WindowConfig, throttle_for

PRODUCE = "produce"
FETCH = "fetch"
REQUEST = "request"
CONFIG_KEY = {
    PRODUCE: entities.PRODUCER_BYTE_RATE,
    FETCH: entities.CONSUMER_BYTE_RATE,
    REQUEST: entities.REQUEST_PERCENTAGE,
}
#: A group's sensor and metric series are dropped after this many window spans without records.
IDLE_SPANS = 30


class QuotaManager:
    """See module docstring. ``clock`` is monotonic seconds (injected for unit tests)."""

    def __init__(
        self,
        broker_id: int,
        *,
        static_window: WindowConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_id = broker_id
        self.configs = entities.QuotaConfigs()
        self._static_window = static_window or WindowConfig()
        self.window = self._static_window
        self.clock = clock
        #: (type, group user, group client) -> (sensor, time of the last record)
        self._sensors: dict[tuple[str, str, str], tuple[SampledRate, float]] = {}
        #: (type, user, client_id) -> monotonic time the hold ends
        self._holds: dict[tuple[str, str, str], float] = {}

    # ---------------------------------------------------------------- configuration

    def configs_changed(self) -> None:
        """Called by the watcher after it changed ``configs``: applies window settings."""
        window = self.configs.window(self.broker_id, self._static_window)
        if window != self.window:
            self.window = window
            for kind, user, client in list(self._sensors):
                metrics.forget_quota_group(kind, user, client)
            self._sensors.clear()

    # ---------------------------------------------------------------- recording

    def record(self, kind: str, user: str, client_id: str, value: float) -> float:
        """Record ``value`` for a request of ``(user, client_id)``; returns the throttle delay
        in seconds (0 when within quota) and, when positive, holds the client for it."""
        now = self.clock()
        match = self.configs.resolve(user, client_id, CONFIG_KEY[kind])
        group = (kind, match.user, match.client_id) if match else (kind, user, client_id)
        entry = self._sensors.get(group)
        sensor = entry[0] if entry is not None else SampledRate(self.window, now)
        sensor.record(value, now)
        self._sensors[group] = (sensor, now)
        labels = metrics.QUOTA_VALUE.labels(*group)
        labels.inc(value)
        delay = 0.0
        if match is not None:
            metrics.QUOTA_LIMIT.labels(*group).set(match.bound)
            delay = throttle_for(sensor, match.bound, now)
        metrics.QUOTA_RATE.labels(*group).set(sensor.rate(now))
        if delay > 0:
            metrics.QUOTA_THROTTLE_SECONDS.labels(*group).inc(delay)
            metrics.QUOTA_THROTTLED.labels(*group).inc()
            key = (kind, user, client_id)
            self._holds[key] = max(self._holds.get(key, 0.0), now + delay)
        return delay

    def record_request_time(self, user: str, client_id: str, seconds: float) -> float:
        """Request quota: ``seconds`` of handling time; returns the throttle delay."""
        metrics.QUOTA_REQUEST_SECONDS.labels(user, client_id).inc(seconds)
        return self.record(REQUEST, user, client_id, 100.0 * seconds)

    # ---------------------------------------------------------------- holding

    def hold_remaining(self, kinds: Iterable[str], user: str, client_id: str) -> float:
        """Seconds until a request of ``(user, client_id)`` of ``kinds`` may be admitted: the
        client's own holds, and the delay of any of its quota groups that is over its quota
        right now (another client of a shared quota pushed it over: this one waits too,
        without adding to it)."""
        now = self.clock()
        remaining = 0.0
        for kind in kinds:
            until = self._holds.get((kind, user, client_id))
            if until is not None:
                if until <= now:
                    del self._holds[(kind, user, client_id)]
                else:
                    remaining = max(remaining, until - now)
            match = self.configs.resolve(user, client_id, CONFIG_KEY[kind])
            if match is None:
                continue
            entry = self._sensors.get((kind, match.user, match.client_id))
            if entry is not None:
                remaining = max(remaining, throttle_for(entry[0], match.bound, now))
        return remaining

    async def wait(self, kinds: Iterable[str], user: str, client_id: str) -> None:
        """Return once a request of ``(user, client_id)`` of ``kinds`` may be admitted (see
        :meth:`hold_remaining`; holds may be extended while waiting, the wait follows). The
        caller records right after, with no await in between."""
        kinds = tuple(kinds)
        while (remaining := self.hold_remaining(kinds, user, client_id)) > 0:
            await asyncio.sleep(remaining)

    # ---------------------------------------------------------------- upkeep

    def refresh_metrics(self) -> None:
        """Update every group's rate gauge (rates decay without records) and drop groups idle
        for ``IDLE_SPANS`` window spans. Run periodically by the broker."""
        now = self.clock()
        idle_after = IDLE_SPANS * self.window.span_s
        for group, (sensor, last) in list(self._sensors.items()):
            if now - last > idle_after:
                del self._sensors[group]
                metrics.forget_quota_group(*group)
            else:
                metrics.QUOTA_RATE.labels(*group).set(sensor.rate(now))
        for key, until in list(self._holds.items()):
            if until <= now:
                del self._holds[key]

    async def run_metrics(self) -> None:
        """Forever: :meth:`refresh_metrics` once per window."""
        while True:
            await asyncio.sleep(self.window.window_s)
            self.refresh_metrics()

    def rate(self, kind: str, user: str, client_id: str) -> float | None:
        """The measured rate of a quota group (tags as in the metrics), None if unmeasured."""
        entry = self._sensors.get((kind, user, client_id))
        return None if entry is None else entry[0].rate(self.clock())
