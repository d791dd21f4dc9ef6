"""Interop test helpers: talk to a running cluster with the raw generated stubs only.

Imported by the test modules as ``interop_util`` (fixtures are in conftest.py).

The ``cluster`` fixture (tests/conftest.py) starts real etcd, controller and broker processes;
its ``bootstrap`` is ``"127.0.0.1:PORT"`` of a broker. The controller is found the way any
client finds it: through the ``controller`` endpoint of a broker's Metadata response.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from headwater.client import Consumer, TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.v1 import broker_pb2_grpc, controller_pb2, controller_pb2_grpc, metadata_pb2
from headwater.v1.errors_pb2 import ErrorCode

DEADLINE_S = 30.0


def wait_for(what: str, probe: Callable[[], Any], timeout: float = DEADLINE_S) -> Any:
    """Call ``probe`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = probe()
            if result:
                return result
        except grpc.RpcError as exc:  # a service still starting: retry until the deadline
            last_error = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last error: {last_error})")
        time.sleep(0.05)


def controller_address(channel: grpc.Channel) -> str:
    """host:port of the active controller, as advertised in a broker's Metadata."""
    stub = broker_pb2_grpc.BrokerStub(channel)

    def probe() -> str | None:
        md = stub.Metadata(metadata_pb2.MetadataRequest(), timeout=5)
        if md.HasField("controller") and md.controller.port:
            return f"{md.controller.host}:{md.controller.port}"
        return None

    return str(wait_for("a controller in the broker's metadata", probe))


def create_topic(channel: grpc.Channel, partitions: int = 1, prefix: str = "interop") -> str:
    """Create a fresh topic through Controller.CreateTopics; wait until every partition has a
    leader in the broker's metadata. Returns the topic name."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with grpc.insecure_channel(controller_address(channel)) as ctl_channel:
        ctl = controller_pb2_grpc.ControllerStub(ctl_channel)
        request = controller_pb2.CreateTopicsRequest(
            topics=[controller_pb2.NewTopic(name=name, partitions=partitions, replication_factor=1)]
        )
        response = ctl.CreateTopics(request, timeout=10)
    [result] = response.topics
    assert result.error_code == ErrorCode.NONE, result.error_message
    stub = broker_pb2_grpc.BrokerStub(channel)

    def led() -> bool:
        md = stub.Metadata(metadata_pb2.MetadataRequest(topics=[name]), timeout=5)
        topics = [t for t in md.topics if t.name == name and t.error_code == ErrorCode.NONE]
        return bool(topics) and sorted(
            p.partition for p in topics[0].partitions if p.leader >= 0
        ) == list(range(partitions))

    wait_for(f"leaders for {name}", led)
    return name


def npm_ci(directory: Path) -> None:
    """``npm ci`` in directory once per package-lock.json (a stamp in node_modules/)."""
    assert shutil.which("node") and shutil.which("npm"), "node and npm must be on PATH"
    stamp = directory / "node_modules" / ".headwater-package-lock.sha256"
    digest = hashlib.sha256((directory / "package-lock.json").read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text() != digest:
        subprocess.run(
            [
                "nice",
                "-n",
                "15",
                "npm",
                "ci",
                "--prefer-offline",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ],
            cwd=directory,
            check=True,
            timeout=600,
        )
        stamp.write_text(digest)


@contextmanager
def client_cluster(data_dir: Path, brokers: int) -> Iterator[LocalCluster]:
    """A plaintext local cluster for another language's client: ``brokers`` brokers, one
    controller and one group coordinator (the group stream's members join through it)."""
    with LocalCluster(
        data_dir,
        brokers=brokers,
        controllers=1,
        coordinators=1,
        etcd_unsafe_no_fsync=True,
        tls=False,
        authorizer=False,
    ) as cluster:
        yield cluster


def read_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[Any]:
    """The Python consumer reads ``topic`` from the start of each partition until ``count``
    records arrived or 60 s passed; the records (ConsumerRecord)."""
    seen: list[Any] = []
    with Consumer(bootstrap) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 60
        while len(seen) < count and time.monotonic() < deadline:
            seen += consumer.poll(timeout_ms=200)
    return seen
