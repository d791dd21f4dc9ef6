"""IntervalWarning: the first occurrence is logged at once, later ones at most once per
interval, and the next line counts the ones in between."""

from __future__ import annotations

import logging

import pytest

from headwater.platform.log_limits import IntervalWarning


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_interval_counting_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    logger = logging.getLogger("tests.log_limits")
    limited = IntervalWarning(logger, 10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        assert limited.warning("disk %s full", "a") is True
        clock.now += 4
        assert limited.warning("disk %s full", "b") is False
        clock.now += 5.9
        assert limited.warning("disk %s full", "c") is False
        clock.now += 0.1
        assert limited.warning("disk %s full", "d") is True
        clock.now += 10
        assert limited.warning("disk %s full", "e") is True
    assert [r.getMessage() for r in caplog.records] == [
        "disk a full",
        "disk d full (and 2 more like it since the previous line)",
        "disk e full",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
