"""Sampled-window rate and the throttle delay, as Kafka's ``Rate``/``SampledStat`` and
``ClientQuotaManager.throttleTime``. Pure logic: the clock is a parameter, nothing here awaits.

A :class:`SampledRate` keeps ``num_windows`` samples of ``window_s`` seconds each. A value is
added to the current sample (a new one starts when the current one is ``window_s`` old; the
oldest is dropped beyond ``num_windows``). Samples older than ``num_windows * window_s`` are
purged before measuring. The measured rate is ``total / elapsed`` where ``elapsed`` runs from
the start of the oldest sample to now, but is never shorter than ``num_windows - 1`` whole
windows — so a new client's first burst is spread over the whole window, as in Kafka.

:func:`throttle_for` is the delay that brings a group over its quota back under it *and keeps
it there*: with nothing recorded meanwhile, the measured rate stays <= quota from the end of
the delay on. For the current measurement (``total`` recorded since the oldest sample began
``age`` seconds ago) that is ``total / quota - age``, Kafka's ``(rate - quota) / quota *
elapsed`` once ``age`` exceeds the minimum span (before, Kafka's form under-holds: the span
does not grow until the minimum is reached). But samples leave the window whole: when a light
old sample is dropped while heavier ones remain, the rate over the shorter span jumps (after a
burst or a quota change, by up to 1 / (num - 1)). So the delay is taken over every future
measurement: for each suffix of samples, the time from which it is within the quota, if that
falls while it is the measured set. The delay is capped at the whole span
``num_windows * window_s``; a client still over its quota then is delayed again.

Not thread-safe: one owner (the broker's event loop).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WindowConfig:
    """``quota.window.num`` samples of ``quota.window.size.seconds`` each."""

    num_windows: int = 11
    window_s: float = 1.0

    def __post_init__(self) -> None:
        if self.num_windows < 1:
            raise ValueError(f"quota.window.num must be >= 1, got {self.num_windows}")
        if self.window_s <= 0:
            raise ValueError(f"quota.window.size.seconds must be > 0, got {self.window_s}")

    @property
    def span_s(self) -> float:
        return self.num_windows * self.window_s

    @property
    def min_span_s(self) -> float:
        """Shortest measurement span: ``num - 1`` windows (one window when ``num`` is 1)."""
        return max(self.num_windows - 1, 1) * self.window_s


class SampledRate:
    """Rate of recorded values per second over the last ``num_windows`` windows."""

    def __init__(self, config: WindowConfig, now: float) -> None:
        self.config = config
        #: [start time, total] per sample, oldest first; never empty
        self._samples: list[list[float]] = [[now, 0.0]]

    def record(self, value: float, now: float) -> None:
        """Add ``value`` at time ``now`` (times never go backwards for one owner)."""
        current = self._samples[-1]
        if now - current[0] >= self.config.window_s:
            current = [now, 0.0]
            self._samples.append(current)
            if len(self._samples) > self.config.num_windows:
                del self._samples[0]
        current[1] += value

    def _purge(self, now: float) -> None:
        span = self.config.span_s
        keep = [s for s in self._samples if now - s[0] < span]
        self._samples = keep or [[now, 0.0]]

    def age_s(self, now: float) -> float:
        """Seconds since the oldest kept sample began."""
        self._purge(now)
        return now - self._samples[0][0]

    def elapsed_s(self, now: float) -> float:
        """The measurement span: from the oldest sample's start, at least ``num - 1`` windows."""
        return max(self.age_s(now), self.config.min_span_s)

    def samples(self, now: float) -> list[tuple[float, float]]:
        """``(start, total)`` of each kept sample, oldest first."""
        self._purge(now)
        return [(start, total) for start, total in self._samples]

    def total(self, now: float) -> float:
        self._purge(now)
        return sum(s[1] for s in self._samples)

    def rate(self, now: float) -> float:
        """Recorded values per second over the measurement span."""
        return self.total(now) / self.elapsed_s(now)


def throttle_delay_s(
    total: float, quota: float, age_s: float, min_span_s: float, max_s: float
) -> float:
    """Seconds to hold a group that recorded ``total`` over the last ``age_s`` seconds so its
    current measured rate (over at least ``min_span_s``) falls back to ``quota``; 0 when
    within the quota. ``quota`` must be positive."""
    if total / max(age_s, min_span_s) <= quota:
        return 0.0
    return min(total / quota - age_s, max_s)


def throttle_for(sensor: SampledRate, quota: float, now: float) -> float:
    """The delay after which ``sensor`` measures at most ``quota`` now and at every later
    time, as long as nothing more is recorded (see module docstring)."""
    cfg = sensor.config
    minimum = cfg.min_span_s
    span = cfg.span_s
    samples = sensor.samples(now)
    delay = 0.0
    suffix = 0.0
    for i in range(len(samples) - 1, -1, -1):
        start, value = samples[i]
        suffix += value
        if suffix / quota <= minimum:
            continue  # within the quota whenever these samples are the measured set
        measured_from = now if i == 0 else max(now, samples[i - 1][0] + span)
        measured_until = start + span
        within_from = start + suffix / quota
        violated_until = min(within_from, measured_until)
        if violated_until > measured_from:
            delay = max(delay, violated_until - now)
    return min(delay, span)
