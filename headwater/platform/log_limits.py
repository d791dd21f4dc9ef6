"""A log line for a condition that recurs on every request, at most once per interval.

A broker whose disk is full fails every produce request to it: one warning per request would
flood its log, none at all leaves the operator a metric and nothing to read.
:class:`IntervalWarning` logs the first occurrence at once and then at most one line per
``interval_s``, each saying how many occurrences were not logged since the line before it (a
count not followed by a later occurrence is never logged; the metric beside it counts all).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class IntervalWarning:
    """``warning(msg, *args)`` on ``logger`` at most once per ``interval_s``; the occurrences
    in between are counted, and the next line that is logged says how many there were.
    Not thread-safe: owned by one event loop (or one thread)."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._next_at = -float("inf")
        self._unlogged = 0

    def warning(self, msg: str, *args: object) -> bool:
        """Log now (True) or count this occurrence for the next line (False)."""
        now = self._clock()
        if now < self._next_at:
            self._unlogged += 1
            return False
        self._next_at = now + self._interval_s
        if self._unlogged:
            msg += " (and %d more like it since the previous line)"
            args = (*args, self._unlogged)
            self._unlogged = 0
        self._logger.warning(msg, *args)
        return True
