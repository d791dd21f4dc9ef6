"""A new user's first session with the real grpcurl: only server reflection, minimal requests.

grpcurl (github.com/fullstorydev/grpcurl, built once from the Go module proxy into a cache by
scripts/tools/go-tool.sh) lists the services, describes a method, resolves the reflection
service through ``grpc.reflection.v1`` itself, creates a topic with nothing but its name,
produces with only topic and partition set, and consumes with FetchRecords giving only topic and
partition: every unset size, wait and count is the server's default (docs/api.md). A negative
size is refused in-band with a typed error. This is the session docs/api.md shows.
"""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from interop_util import controller_address, wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def grpcurl() -> str:
    """The grpcurl binary (built on first use: about 100 s on 2 idle cores, cached after)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/tools/go-tool.sh"), "grpcurl"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def _run(grpcurl: str, address: str, *args: str, data: Any = None) -> str:
    argv = [grpcurl, "-plaintext", "-emit-defaults", "-max-time", "30"]
    if data is not None:
        argv += ["-d", json.dumps(data)]
    out = subprocess.run(
        [*argv, address, *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, f"grpcurl {args} failed: {out.stderr}"
    return out.stdout


def _first_message(grpcurl: str, address: str, method: str, data: Any) -> dict[str, Any]:
    """The first response of a server stream that stays open (FetchRecords): read grpcurl's
    output until one whole JSON object, then stop it (by its pid; -max-time bounds it anyway)."""
    argv = [grpcurl, "-plaintext", "-max-time", "60", "-d", json.dumps(data), address, method]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            lines: list[str] = []
            for line in proc.stdout:
                lines.append(line)
                if line.rstrip() == "}":  # grpcurl pretty-prints: a top-level object ends alone
                    return dict(json.loads("".join(lines)))
            raise AssertionError(f"{method} ended without a message (exit {proc.wait()})")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_a_grpcurl_session_with_minimal_requests(
    cluster: Any, broker_channel: grpc.Channel, grpcurl: str
) -> None:
    broker = cluster.bootstrap
    services = _run(grpcurl, broker, "list").split()
    assert {
        "headwater.v1.Broker",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= set(services)
    described = _run(grpcurl, broker, "describe", "headwater.v1.Broker.FetchRecords")
    assert "rpc FetchRecords ( .headwater.v1.FetchRequest ) returns ( stream" in described
    assert "max_bytes" in _run(grpcurl, broker, "describe", "headwater.v1.FetchRequest")
    # the v1 reflection service answers in its own name (grpcurl resolves it through itself)
    v1 = json.loads(
        _run(
            grpcurl,
            broker,
            "grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            data={"list_services": ""},
        )
    )
    assert "headwater.v1.Broker" in [s["name"] for s in v1["list_services_response"]["service"]]

    controller = controller_address(broker_channel)
    topic = f"grpcurl-{uuid.uuid4().hex[:8]}"
    created = json.loads(
        _run(
            grpcurl,
            controller,
            "headwater.v1.Controller/CreateTopics",
            data={"topics": [{"name": topic}]},  # partitions and replication factor: defaults
        )
    )
    assert created["topics"][0]["error_code"] == "NONE", created

    value = base64.b64encode(b"hello from grpcurl").decode()

    def produced() -> dict[str, Any] | None:
        answer = json.loads(
            _run(
                grpcurl,
                broker,
                "headwater.v1.Broker/ProduceRecords",
                data={"topic": topic, "partition": 0, "records": [{"value": value}]},
            )
        )
        result = dict(answer["partitions"][0])
        # until the new partition's leader is known to the broker
        return result if result["error_code"] == "NONE" else None

    result = wait_for("a minimal ProduceRecords to succeed", produced)
    assert result["base_offset"] == "0"

    first = _first_message(
        grpcurl, broker, "headwater.v1.Broker/FetchRecords", {"topic": topic, "partition": 0}
    )
    assert "error_code" not in first, first  # protojson leaves NONE out
    assert [r["value"] for r in first["records"]] == [value]
    assert first["next_offset"] == "1" and first["high_watermark"] == "1"

    refused = json.loads(
        _run(
            grpcurl,
            broker,
            "headwater.v1.Broker/FetchRecords",
            data={"topic": topic, "partition": 0, "max_bytes": -1},
        )
    )
    assert refused["error_code"] == "INVALID_FETCH_SIZE"
    assert "max_bytes must be >= 0" in refused["error_message"]
