"""Fixtures for controller tests: real controller processes against the real session etcd,
and an in-process stand-in broker that records what the controller sends it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from headwater.dev.cluster import ServiceProcess, controller_process, wait_serving


@pytest.fixture
def start_controller(etcd: str, tmp_path: Path) -> Iterator[Callable[[int], ServiceProcess]]:
    """``start_controller(cid)`` starts a controller (lease TTL 2 s) and waits until it
    serves; every one started is stopped by PID at the end of the test."""
    started: list[ServiceProcess] = []

    def start(cid: int) -> ServiceProcess:
        proc = controller_process(cid, etcd, tmp_path, tmp_path, lease_ttl=2)
        proc.start()
        started.append(proc)
        wait_serving(proc, 30)
        return proc

    yield start
    for proc in started:
        proc.stop(timeout=5)
