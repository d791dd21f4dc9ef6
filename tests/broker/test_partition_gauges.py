"""The periodic log-shape gauges: set when a partition's segments or size changed, not every
second for every idle partition; a forgotten partition's series comes back when it is hosted
again."""

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
    metrics.refresh_partition_gauges([p])
    assert _size("gauges-t") == 100
    # an unchanged partition is not set again: a value written meanwhile stays
    metrics.LOG_SIZE.labels("gauges-t", "0").set(-5)
    metrics.refresh_partition_gauges([p])
    assert _size("gauges-t") == -5
    p.log.size_in_bytes = 250
    metrics.refresh_partition_gauges([p])
    assert _size("gauges-t") == 250
    assert (
        REGISTRY.get_sample_value(
            "headwater_broker_log_segments", {"topic": "gauges-t", "partition": "0"}
        )
        == 1
    )
    metrics.forget_partition("gauges-t", 0)
    assert _size("gauges-t") is None
    metrics.refresh_partition_gauges([p])
    assert _size("gauges-t") == 250
    metrics.set_log_size("gauges-t", 0, 300)  # an append's own update
    p.log.size_in_bytes = 300
    metrics.refresh_partition_gauges([p])
    assert _size("gauges-t") == 300
    metrics.forget_partition("gauges-t", 0)
