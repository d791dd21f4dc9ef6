"""Fixtures for broker tests: a real broker process (module scope) against the session's real
etcd, and the test acting as its controller (see broker_helpers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from broker_helpers import ActingController, BrokerProc

from headwater.dev.etcd_server import EtcdServer


@pytest.fixture(scope="module")
def broker(
    etcd_server: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProc]:
    """A broker process shared by a test module (tests use distinct topic names)."""
    base = tmp_path_factory.mktemp("broker")
    proc = BrokerProc(1, base / "data", etcd_server.endpoint, base / "broker.log")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def controller(broker: BrokerProc) -> Iterator[ActingController]:
    c = ActingController(broker)
    try:
        yield c
    finally:
        c.close()
