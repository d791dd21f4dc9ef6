"""Unit tests of the quota manager with a fake clock: groups, delays and holds."""

from __future__ import annotations

import json

import pytest

from services.broker.quotas import entities
from services.broker.quotas.manager import FETCH, PRODUCE, REQUEST, QuotaManager
from services.broker.quotas.rate import WindowConfig

pytestmark = pytest.mark.fast


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _manager(clock: Clock) -> QuotaManager:
    return QuotaManager(1, static_window=WindowConfig(11, 1.0), clock=clock)


def _put(m: QuotaManager, path: str, **values: str) -> None:
    m.configs.apply(entities.CONFIGS_PREFIX + path, json.dumps(values).encode())
    m.configs_changed()


def test_no_quota_no_delay() -> None:
    m = _manager(Clock())
    assert m.record(PRODUCE, "ANONYMOUS", "c", 10**9) == 0.0
    assert m.hold_remaining((PRODUCE,), "ANONYMOUS", "c") == 0.0


def test_over_quota_delays_and_holds_only_that_client_and_type() -> None:
    clock = Clock()
    m = _manager(clock)
    _put(m, "clients/<default>", producer_byte_rate="100")
    assert m.record(PRODUCE, "ANONYMOUS", "a", 500.0) == 0.0  # 50 B/s over the 10 s span
    clock.now += 2.0
    delay = m.record(PRODUCE, "ANONYMOUS", "a", 1500.0)  # 2000 B: 200 B/s, twice the quota
    assert delay == pytest.approx(11.0)  # 18 s capped at the 11 s span
    assert m.hold_remaining((PRODUCE,), "ANONYMOUS", "a") == pytest.approx(11.0)
    assert m.hold_remaining((FETCH, REQUEST), "ANONYMOUS", "a") == 0.0
    # <default> gives each client-id its own quota: b is not affected by a
    assert m.record(PRODUCE, "ANONYMOUS", "b", 500.0) == 0.0
    assert m.hold_remaining((PRODUCE,), "ANONYMOUS", "b") == 0.0
    clock.now += 11.0
    assert m.hold_remaining((PRODUCE,), "ANONYMOUS", "a") == 0.0
    rate = m.rate(PRODUCE, "", "a")
    assert rate is not None and rate <= 100.0


def test_user_quota_is_shared_by_the_users_clients() -> None:
    clock = Clock()
    m = _manager(clock)
    _put(m, "users/ANONYMOUS", consumer_byte_rate="100")
    assert m.record(FETCH, "ANONYMOUS", "a", 900.0) == 0.0
    clock.now += 5.0
    delay = m.record(FETCH, "ANONYMOUS", "b", 600.0)  # shared sensor: 1500 B / 10 s
    # 1500 B over 10 s until the first sample (t=0) leaves the 11 s window: held until then
    assert delay == pytest.approx(11.0 - 5.0)
    assert m.hold_remaining((FETCH,), "ANONYMOUS", "b") > 0
    # a is not admitted either while the shared group is over its quota
    assert m.hold_remaining((FETCH,), "ANONYMOUS", "a") == pytest.approx(delay)
    assert m.hold_remaining((PRODUCE,), "ANONYMOUS", "a") == 0.0
    assert m.rate(FETCH, "ANONYMOUS", "") == pytest.approx(150.0)


def test_request_percentage() -> None:
    clock = Clock()
    m = _manager(clock)
    _put(m, "users/ANONYMOUS/clients/c", request_percentage="10")
    # 1 s of handling time within the first window: 100 percent-seconds over a 10 s span
    assert m.record_request_time("ANONYMOUS", "c", 1.0) == 0.0
    clock.now += 4.0
    delay = m.record_request_time("ANONYMOUS", "c", 0.5)  # 150 percent-seconds: 15 percent
    # 15 percent until the first sample leaves the 11 s window at t=11
    assert delay == pytest.approx(11.0 - 4.0)
    assert m.hold_remaining((REQUEST,), "ANONYMOUS", "c") == pytest.approx(7.0)


def test_changed_quota_applies_to_the_next_record() -> None:
    clock = Clock()
    m = _manager(clock)
    _put(m, "clients/c", producer_byte_rate="1000")
    assert m.record(PRODUCE, "u", "c", 5000.0) == 0.0
    _put(m, "clients/c", producer_byte_rate="100")
    # 500 B/s against 100: (5 - 1) x 10 s = 40 s, capped at the 11 s span
    assert m.record(PRODUCE, "u", "c", 0.0) == pytest.approx(11.0)
    assert m.hold_remaining((PRODUCE,), "u", "c") > 0


def test_window_change_restarts_measurements_and_idle_groups_expire() -> None:
    clock = Clock()
    m = _manager(clock)
    m.record(PRODUCE, "u", "c", 100.0)
    assert m.rate(PRODUCE, "u", "c") is not None
    _put(m, "brokers/<default>", **{"quota.window.num": "4"})
    assert m.window == WindowConfig(4, 1.0)
    assert m.rate(PRODUCE, "u", "c") is None
    m.record(PRODUCE, "u", "c", 100.0)
    clock.now += 1000.0
    m.refresh_metrics()
    assert m.rate(PRODUCE, "u", "c") is None
