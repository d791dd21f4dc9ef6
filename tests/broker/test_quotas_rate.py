"""Unit tests of the pure quota logic: sampled-window rate, throttle delay, precedence."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.broker.quotas import entities
from services.broker.quotas.rate import SampledRate, WindowConfig, throttle_delay_s, throttle_for
from services.broker.quotas.timing import Timed

pytestmark = pytest.mark.fast

W = WindowConfig(num_windows=11, window_s=1.0)


def test_first_burst_is_spread_over_num_minus_one_windows() -> None:
    s = SampledRate(W, now=100.0)
    s.record(1000.0, 100.0)
    assert s.elapsed_s(100.0) == pytest.approx(10.0)
    assert s.rate(100.0) == pytest.approx(100.0)


def test_rate_over_a_long_run_is_total_over_elapsed() -> None:
    s = SampledRate(W, now=0.0)
    for t in range(11):
        s.record(500.0, float(t))
    # samples started at 0..10, all inside the 11 s span: 5500 bytes over 10.5 s
    assert s.rate(10.5) == pytest.approx(5500.0 / 10.5)


def test_old_samples_are_dropped() -> None:
    s = SampledRate(W, now=0.0)
    s.record(10_000.0, 0.0)
    for t in range(1, 13):
        s.record(100.0, float(t))
    # the sample of t=0 is older than the 11 s span at t=12: only 12 x 100 remain at most
    assert s.total(12.0) <= 1200.0
    assert s.total(12.0) >= 1000.0


def test_delay_brings_the_rate_back_to_the_quota() -> None:
    s = SampledRate(W, now=0.0)
    for t in range(10):
        s.record(200.0, float(t))
    s.record(1000.0, 10.0)  # 3000 B over 10 s: 300 B/s against 200
    delay = throttle_for(s, 200.0, 10.0)
    assert delay == pytest.approx((300.0 - 200.0) / 200.0 * 10.0)  # Kafka's formula here
    # after the delay with nothing recorded, the measured rate equals the quota
    assert s.rate(10.0 + delay) == pytest.approx(200.0)


def test_first_burst_delay_is_exact_not_kafkas_under_hold() -> None:
    s = SampledRate(W, now=0.0)
    s.record(2400.0, 0.0)  # 240 B/s over the 10 s minimum span, against 200
    delay = throttle_for(s, 200.0, 0.0)
    assert delay == pytest.approx(W.span_s)  # 2400 / 200 = 12 s, capped at the 11 s span
    s2 = SampledRate(W, now=0.0)
    s2.record(2100.0, 1.0)
    delay2 = throttle_for(s2, 200.0, 1.0)
    # now: 2100 B over the 10 s minimum: 210 B/s. The empty sample begun at 0 leaves the
    # window at 11, the 2100 B then count over 10 s again until 11.5: held until then
    assert delay2 == pytest.approx(10.5)
    for t in (1.0 + delay2, 12.0, 12.5):
        assert s2.rate(t) <= 200.0 + 1e-9


def test_delay_covers_a_light_sample_leaving_the_window() -> None:
    cfg = WindowConfig(num_windows=5, window_s=1.0)  # minimum span 4 s, span 5 s
    s = SampledRate(cfg, now=0.0)
    s.record(100.0, 0.0)  # light sample at 0
    s.record(3900.0, 1.0)  # heavy sample at 1: 4000 B over 4 s: exactly the quota of 1000
    assert s.rate(1.0) == pytest.approx(1000.0)
    assert throttle_for(s, 1000.0, 1.0) == 0.0  # 3900 / 1000 <= 4 s: never over later
    s.record(200.0, 1.5)  # 4200 B over 4 s now; when the light sample leaves at t=5 the
    # heavy one alone (4100 B, begun at 1) is measured over 4 s: 1025/s, within from t=5.1
    delay = throttle_for(s, 1000.0, 1.5)
    assert delay == pytest.approx(5.1 - 1.5)
    for t in (1.5 + delay, 5.5, 6.0):
        assert s.rate(t) <= 1000.0 + 1e-9


def test_no_delay_within_quota_and_delay_is_capped() -> None:
    assert throttle_delay_s(1000.0, 200.0, 5.0, 10.0, 11.0) == 0.0  # 100 B/s over 10 s
    assert throttle_delay_s(2000.0, 200.0, 10.0, 10.0, 11.0) == 0.0
    assert throttle_delay_s(10_000.0, 1.0, 10.0, 10.0, 11.0) == 11.0


def test_window_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        WindowConfig(num_windows=0)
    assert WindowConfig(num_windows=1, window_s=2.0).min_span_s == 2.0
    with pytest.raises(ValueError):
        WindowConfig(window_s=0)


def _put(c: entities.QuotaConfigs, path: str, **values: str) -> None:
    assert c.apply(entities.CONFIGS_PREFIX + path, json.dumps(values).encode())


def test_precedence_most_specific_first_each_key_separately() -> None:
    c = entities.QuotaConfigs()
    _put(c, "clients/<default>", producer_byte_rate="8", consumer_byte_rate="80")
    _put(c, "clients/app", producer_byte_rate="7")
    _put(c, "users/<default>", producer_byte_rate="6")
    _put(c, "users/<default>/clients/<default>", producer_byte_rate="5")
    _put(c, "users/<default>/clients/app", producer_byte_rate="4")
    _put(c, "users/alice", producer_byte_rate="3")
    _put(c, "users/alice/clients/<default>", producer_byte_rate="2")
    _put(c, "users/alice/clients/app", producer_byte_rate="1")
    order = [
        "users/alice/clients/app",
        "users/alice/clients/<default>",
        "users/alice",
        "users/<default>/clients/app",
        "users/<default>/clients/<default>",
        "users/<default>",
        "clients/app",
        "clients/<default>",
    ]
    tags = [
        ("alice", "app"),
        ("alice", "app"),
        ("alice", ""),
        ("alice", "app"),
        ("alice", "app"),
        ("alice", ""),
        ("", "app"),
        ("", "app"),
    ]
    for i, path in enumerate(order):
        m = c.resolve("alice", "app", entities.PRODUCER_BYTE_RATE)
        assert m == entities.Match(float(i + 1), *tags[i]), path
        # the consumer key is set only at clients/<default>: resolved on its own
        consumer = c.resolve("alice", "app", entities.CONSUMER_BYTE_RATE)
        assert consumer == entities.Match(80.0, "", "app")
        assert c.apply(entities.CONFIGS_PREFIX + path, None)  # delete: next level applies
    assert c.resolve("alice", "app", entities.PRODUCER_BYTE_RATE) is None


def test_invalid_values_are_ignored_and_foreign_keys_not_applied() -> None:
    c = entities.QuotaConfigs()
    _put(c, "clients/x", producer_byte_rate="-5", consumer_byte_rate="abc", request_percentage="50")
    assert c.resolve("u", "x", entities.PRODUCER_BYTE_RATE) is None
    assert c.resolve("u", "x", entities.CONSUMER_BYTE_RATE) is None
    assert c.resolve("u", "x", entities.REQUEST_PERCENTAGE) == entities.Match(50.0, "", "x")
    assert c.apply(entities.CONFIGS_PREFIX + "clients/y", b"not json")
    assert c.resolve("u", "y", entities.REQUEST_PERCENTAGE) is None
    assert not c.apply("/headwater/topics/t", b"{}")


def test_window_settings_precedence() -> None:
    c = entities.QuotaConfigs()
    static = entities.static_window({"quota.window.num": "5"})
    assert static == WindowConfig(5, 1.0)
    _put(c, "brokers/<default>", **{"quota.window.size.seconds": "2"})
    assert c.window(1, static) == WindowConfig(5, 2.0)
    _put(c, "brokers/1", **{"quota.window.num": "3", "quota.window.size.seconds": "0.5"})
    assert c.window(1, static) == WindowConfig(3, 0.5)
    assert c.window(2, static) == WindowConfig(5, 2.0)
    _put(c, "brokers/1", **{"quota.window.num": "0"})  # invalid: falls back
    assert c.window(1, static) == static


def test_timed_counts_run_time_not_waits() -> None:
    async def work() -> int:
        await asyncio.sleep(0.2)  # waiting: not counted
        return 7

    async def main() -> tuple[int, float]:
        t = Timed(work())
        result = await t
        return result, t.seconds

    result, seconds = asyncio.run(main())
    assert result == 7
    assert seconds < 0.1


def test_timed_propagates_cancellation() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    async def main() -> bool:
        task = asyncio.ensure_future(Timed(forever()))
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(main())
