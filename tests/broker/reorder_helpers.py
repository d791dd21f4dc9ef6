"""Helpers of the broker's produce reorder-wait tests (test_produce_reorder.py,
test_produce_reorder_wakeups.py): a leader replica of a fresh log, the wait counter."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from headwater.config import TopicConfig
from services.broker.partition import LeaderState, Partition
from services.broker.storage.log import Log


def reorder_waits(topic: str) -> float:
    return (
        REGISTRY.get_sample_value("headwater_broker_produce_reorder_waits_total", {"topic": topic})
        or 0.0
    )


async def reorder_leader(tmp_path: Path, topic: str) -> Partition:
    config = TopicConfig()
    p = Partition(topic, 0, Log(tmp_path / f"{topic}-0", config), config, 1)
    await p.become_leader(LeaderState(1, 1, 0, (1,), (1,)), 0.0)
    return p
