"""The periodic log-shape gauges: set when a partition's segments or size changed, not every
time for every idle partition; a forgotten partition's series comes back when it is hosted
again. The replication-health gauges: computed when scraped, not by a periodic walk."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from services.broker import metrics

pytestmark = pytest.mark.fast


def _partition(topic: str, segments: int, size: int) -> SimpleNamespace:
    log = SimpleNamespace(closed=False, num_segments=segments, size_in_bytes=size)
    return SimpleNamespace(topic=topic, partition=0, log=log, is_leader=False)


def _size(topic: str) -> float | None:
    return REGISTRY.get_sample_value(
        "headwater_broker_log_size_bytes", {"topic": topic, "partition": "0"}
    )


def test_log_shape_gauges_are_set_when_they_change() -> None:
    p = _partition("gauges-t", 1, 100)
    metrics.refresh_log_shapes([p])
    assert _size("gauges-t") == 100
    # an unchanged partition is not set again: a value written meanwhile stays
    metrics.LOG_SIZE.labels("gauges-t", "0").set(-5)
    metrics.refresh_log_shapes([p])
    assert _size("gauges-t") == -5
    p.log.size_in_bytes = 250
    metrics.refresh_log_shapes([p])
    assert _size("gauges-t") == 250
    assert (
        REGISTRY.get_sample_value(
            "headwater_broker_log_segments", {"topic": "gauges-t", "partition": "0"}
        )
        == 1
    )
    metrics.forget_partition("gauges-t", 0)
    assert _size("gauges-t") is None
    metrics.refresh_log_shapes([p])
    assert _size("gauges-t") == 250
    metrics.set_log_size("gauges-t", 0, 300)  # an append's own update
    p.log.size_in_bytes = 300
    metrics.refresh_log_shapes([p])
    assert _size("gauges-t") == 300
    metrics.forget_partition("gauges-t", 0)


def _led(isr: tuple[int, ...], *, leader: bool = True, closed: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        is_leader=leader,
        replicas=(1, 2, 3),
        isr=isr,
        config=SimpleNamespace(min_insync_replicas=2),
        log=SimpleNamespace(closed=closed),
    )


def _health() -> list[float | None]:
    return [
        REGISTRY.get_sample_value(f"headwater_broker_{name}_partitions")
        for name in ("under_replicated", "at_min_isr", "under_min_isr")
    ]


def test_replication_health_is_computed_when_scraped() -> None:
    """The gauges read the partitions as they are at the scrape: no pass has to run in
    between, and nothing walks the partitions while nobody scrapes."""
    hosted = {0: _led((1, 2, 3)), 1: _led((1, 2)), 2: _led((1,)), 3: _led((1,), leader=False)}
    hosted[4] = _led((1,), closed=True)
    walks: list[int] = []

    def partitions() -> list[SimpleNamespace]:
        walks.append(1)
        return list(hosted.values())

    metrics.health_when_scraped(partitions)
    try:
        assert walks == []
        assert _health() == [2.0, 1.0, 1.0]
        hosted[2].isr = (1, 2, 3)  # the partition caught up: seen by the next scrape
        assert _health() == [1.0, 1.0, 0.0]
        del hosted[1]
        assert _health() == [0.0, 0.0, 0.0]
    finally:
        metrics.health_when_scraped(lambda: ())
    assert _health() == [0.0, 0.0, 0.0]
