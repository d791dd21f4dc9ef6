"""Fixtures for the storage tests (helpers live in ``storage_helpers``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from storage_helpers import FakeClock

from headwater.config import TopicConfig
from services.broker.storage.log import Log


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Log]]:
    """``open_log(**config)`` opens (or reopens) the log in ``tmp_path / "t-0"``."""
    opened: list[Log] = []

    def factory(directory: Path | None = None, **cfg: object) -> Log:
        log = Log(directory or tmp_path / "t-0", TopicConfig(**cfg), clock=clock)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield factory
    for log in opened:
        log.close(mark_clean=False)
