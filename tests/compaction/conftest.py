"""Fixtures for the compaction tests (helpers live in ``compaction_helpers``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from compaction_helpers import FakeClock

from headwater.config import TopicConfig
from services.broker.storage.log import Log


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Log]]:
    """``open_log(**config)`` opens (or reopens) a compacted log in ``tmp_path / "t-0"``
    (cleanup.policy=compact, small segments, dirty ratio 0 unless given)."""
    opened: list[Log] = []

    def factory(**cfg: object) -> Log:
        base: dict[str, object] = {
            "cleanup_policy": "compact",
            "segment_bytes": 4096,
            "index_interval_bytes": 512,
            "min_cleanable_dirty_ratio": 0.0,
        }
        base.update(cfg)
        log = Log(tmp_path / "t-0", TopicConfig(**base), clock=clock)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield factory
    for log in opened:
        log.close(mark_clean=False)
