"""Bounded waits on conditions (tests never sleep blindly)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.05
) -> T:
    """Poll until ``predicate()`` is truthy and return it; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def async_wait_for(
    predicate: Callable[[], Awaitable[T | None]],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
) -> T:
    """Async twin of :func:`wait_for`; exceptions from ``predicate`` are retried until the
    deadline, then re-raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = await predicate()
            if value:
                return value
        except Exception:
            if time.monotonic() >= deadline:
                raise
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
