"""A client in a second language (Node.js, stock @grpc/grpc-js + @grpc/proto-loader reading
proto/ at run time) produces and consumes through the records path of a real cluster, and the
Python side reads what Node wrote (and Node what Python wrote) through the batch path."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from interop_util import create_topic

from headwater.batch import decode_batches, encode_batch
from headwater.client import Consumer, TopicPartition
from headwater.v1 import broker_pb2, broker_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode

NODE_DIR = Path(__file__).resolve().parent / "node"
STAMP = NODE_DIR / "node_modules" / ".headwater-package-lock.sha256"


@pytest.fixture(scope="session")
def node_client() -> Path:
    """``npm ci`` once per package-lock.json (the result is cached in node_modules/)."""
    assert shutil.which("node") and shutil.which("npm"), "node and npm must be on PATH"
    digest = hashlib.sha256((NODE_DIR / "package-lock.json").read_bytes()).hexdigest()
    if not STAMP.exists() or STAMP.read_text() != digest:
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            check=True,
            timeout=300,
        )
        STAMP.write_text(digest)
    return NODE_DIR / "client.js"


def run_node(script: Path, bootstrap: str, topic: str, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        ["node", str(script), "--bootstrap", bootstrap, "--topic", topic, *extra],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, f"node client failed:\n{proc.stderr}"
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def fetch_batches(channel: grpc.Channel, topic: str, count: int) -> list[Any]:
    """Fetch (batch path) from offset 0 until ``count`` records arrived; decoded batches."""
    stub = broker_pb2_grpc.BrokerStub(channel)
    request = broker_pb2.FetchRequest(
        topic=topic,
        partition=0,
        offset=0,
        max_wait_ms=200,
        min_bytes=1,
        max_bytes=1 << 20,
        replica_id=-1,
        current_leader_epoch=-1,
    )
    stream = stub.Fetch(request, timeout=30)
    batches: list[Any] = []
    try:
        for response in stream:
            assert response.error_code == ErrorCode.NONE, response.error_message
            batches += decode_batches(response.records)
            if sum(len(b) for b in batches) >= count:
                break
    finally:
        stream.cancel()
    return batches


N = 25


def test_node_produces_and_fetches_records(
    cluster: Any, broker_channel: grpc.Channel, node_client: Path
) -> None:
    topic = create_topic(broker_channel)
    out = run_node(node_client, cluster.bootstrap, topic, "--count", str(N))

    assert out["produce"] == {"base_offset": 0, "error_code": "NONE"}
    records = out["records"][:N]
    assert [r["offset"] for r in records] == list(range(N))
    assert [r["value"] for r in records] == [f"node-value-{i}" for i in range(N)]
    assert [r["key"] for r in records] == [f"node-key-{i}" for i in range(N - 1)] + [None]
    assert all(r["headers"] == [["source", "node"], ["empty", None]] for r in records)
    assert all(r["timestamp"] > 0 for r in records)  # 0 on produce: the broker's clock

    # the broker encoded Node's records into a standard batch: Python decodes it
    batches = fetch_batches(broker_channel, topic, N)
    values = [v for b in batches for v in b.values()]
    keys = [k for b in batches for k in b.keys()]  # noqa: SIM118 (RecordBatch.keys)
    headers = [h for b in batches for h in b.headers()]
    assert values[:N] == [f"node-value-{i}".encode() for i in range(N)]
    assert keys[:N] == [f"node-key-{i}".encode() for i in range(N - 1)] + [None]
    assert headers[:N] == [(("source", b"node"), ("empty", None))] * N

    # and the Python client's consumer sees the same records
    seen: list[Any] = []
    with Consumer(cluster.bootstrap) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 30
        while len(seen) < N and time.monotonic() < deadline:
            seen += consumer.poll(timeout_ms=200)
    assert [(r.offset, r.key, r.value, r.headers) for r in seen[:N]] == [
        (i, keys[i], values[i], headers[i]) for i in range(N)
    ]


def test_node_fetches_what_python_produced(
    cluster: Any, broker_channel: grpc.Channel, node_client: Path
) -> None:
    topic = create_topic(broker_channel)
    values = [f"py-{i}".encode() for i in range(7)] + [None]
    keys = [None, b"k1", b"", b"k3", None, b"k5", b"k6", b"tomb"]
    raw = encode_batch(values, keys, headers=[[("lang", b"python")]] * 8, compression_type="zstd")
    stub = broker_pb2_grpc.BrokerStub(broker_channel)
    response = stub.Produce(
        broker_pb2.ProduceRequest(
            acks=broker_pb2.ACKS_ALL,
            timeout_ms=10_000,
            partitions=[broker_pb2.PartitionRecords(topic=topic, partition=0, records=raw)],
        ),
        timeout=15,
    )
    [result] = response.partitions
    assert result.error_code == ErrorCode.NONE, result.error_message

    out = run_node(node_client, cluster.bootstrap, topic, "--count", "8", "--produce-count", "0")
    assert out["produce"] is None
    records = out["records"][:8]
    assert [r["offset"] for r in records] == list(range(8))
    assert [r["value"] for r in records] == [v.decode() if v else None for v in values]
    assert [r["key"] for r in records] == [k.decode() if k is not None else None for k in keys]
    assert all(r["headers"] == [["lang", "python"]] for r in records)
