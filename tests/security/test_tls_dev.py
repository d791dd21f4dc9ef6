"""`headwater dev --tls`: a TLS (mTLS) local cluster whose client files are printed and written
to a JSON file that a client can load as ClientSecurity keyword arguments."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from headwater import errors
from headwater.client import AsyncAdminClient, AsyncProducer
from headwater.client.security import ClientSecurity
from headwater.v1 import broker_pb2_grpc, metadata_pb2


def _read_lines(proc: subprocess.Popen[bytes], until: str, deadline_s: float) -> dict[str, str]:
    """``key: value`` lines of the dev command's stdout, up to the ``until`` key (bounded)."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen = b""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            continue
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
        lines = dict(line.split(": ", 1) for line in seen.decode().splitlines() if ": " in line)
        if until in lines:
            return {k: v.strip() for k, v in lines.items()}
    raise AssertionError(f"no {until!r} line within {deadline_s}s; output: {seen[-2000:]!r}")


def test_dev_tls_prints_client_files_that_work(tmp_path: Path) -> None:
    argv = [
        sys.executable, "-m", "headwater.cli.main", "dev", "--tls",
        "--data-dir", str(tmp_path / "data"),
        "--brokers", "1", "--controllers", "1", "--coordinators", "0",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        info = _read_lines(proc, "tls-client-config", 90)
        bootstrap = info["bootstrap"]
        files = json.loads(Path(info["tls-client-config"]).read_text())
        assert files == {
            "ca_file": info["tls-ca"],
            "cert_file": info["tls-cert"],
            "key_file": info["tls-key"],
        }
        sec = ClientSecurity(**files)

        async def run() -> int:
            async with AsyncAdminClient(bootstrap, security=sec) as admin:
                await admin.create_topic("dev-tls", 1, 1)
            producer = AsyncProducer(bootstrap, security=sec, linger_ms=0)
            await producer.start()
            try:
                return (await (await producer.send("dev-tls", b"hello"))).offset
            finally:
                await producer.close()

        assert asyncio.run(run()) == 0
        with grpc.insecure_channel(bootstrap) as ch, pytest.raises(grpc.RpcError) as refused:
            broker_pb2_grpc.BrokerStub(ch).Metadata(metadata_pb2.MetadataRequest(), timeout=5)
        assert isinstance(errors.from_rpc_error(refused.value), errors.NetworkError)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == 0
