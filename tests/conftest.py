"""Shared fixtures: a real etcd server, and (once the broker exists) a real local cluster.

Everything runs as real processes on 127.0.0.1 with ports picked at run time, and is stopped
by PID when the fixture's scope ends.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from headwater.dev.cluster import LocalCluster
from headwater.dev.etcd_server import EtcdServer
from tests.helpers import node_lock, purity
from tests.security import switch as security_switch

# The single-node Kubernetes tests (tests/k8s_node) need root and bring up a whole node: a plain
# `pytest` leaves them out; `make test` runs them in a second pytest run (with tests/images), on
# one node for that run, and `make test-k8s-node` alone; both set HEADWATER_TEST_K8S_NODE=1.
collect_ignore = [] if os.environ.get("HEADWATER_TEST_K8S_NODE") == "1" else ["k8s_node"]
_NODE_LOCK = pytest.StashKey[IO[str]]()


def pytest_configure(config: pytest.Config) -> None:
    """HEADWATER_TEST_TLS=1: TLS clusters and TLS clients everywhere (tests/security/switch.py).
    A run of the image or node tests holds the machine's node lock (tests/helpers/node_lock.py)
    until it exits: another run on this machine waits for it rather than sharing the node."""
    security_switch.configure()
    if "1" in (os.environ.get("HEADWATER_TEST_K8S_NODE"), os.environ.get("HEADWATER_TEST_IMAGES")):
        config.stash[_NODE_LOCK] = node_lock.hold(node_lock.lock_path())


def pytest_unconfigure(config: pytest.Config) -> None:
    security_switch.unconfigure()
    held = config.stash.get(_NODE_LOCK, None)
    if held is not None:
        held.close()


@pytest.fixture(autouse=True)
def _fast_tests_stay_pure(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Tests marked ``fast`` (``make test-fast``) start no process and use no network
    (tests/helpers/purity.py); set HEADWATER_TEST_PURITY_ALL=1 to hold every test to it (how
    the tier's members are found)."""
    if request.node.get_closest_marker("fast") or os.environ.get("HEADWATER_TEST_PURITY_ALL"):
        with purity.pure(monkeypatch):
            yield
    else:
        yield


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One real etcd for the whole session (tests that need a clean keyspace use
    ``etcd``, which wipes ``/headwater/`` first)."""
    base = tmp_path_factory.mktemp("etcd")
    server = EtcdServer(base / "data", base / "etcd.log", unsafe_no_fsync=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _wipe(endpoint: str) -> None:
    from headwater.platform import etcd as hetcd

    async def run() -> None:
        client = await hetcd.Etcd.connect(endpoint)
        try:
            await client.delete_prefix("/headwater/")
            await client.delete_prefix("/test/")
        finally:
            await client.close()

    asyncio.run(run())


@pytest.fixture
def etcd(etcd_server: EtcdServer) -> str:
    """The endpoint ``"127.0.0.1:PORT"`` of the session etcd, with ``/headwater/`` and
    ``/test/`` emptied before the test."""
    _wipe(etcd_server.endpoint)
    return etcd_server.endpoint


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A module-scoped local cluster: etcd, one controller, one broker (real processes).
    ``cluster.bootstrap`` is the broker's "127.0.0.1:PORT"."""
    data_dir: Path = tmp_path_factory.mktemp("cluster")
    with LocalCluster(data_dir, brokers=1, controllers=1, etcd_unsafe_no_fsync=True) as c:
        yield c


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


os.environ.setdefault("PYTHONUNBUFFERED", "1")
