"""ProcessRunner in a real process (tests/rpc/runner_service.py): signals, ready file, exit
codes and the shutdown order, observed from outside as a supervisor sees them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.helpers.wait import wait_for

SERVICE = Path(__file__).with_name("runner_service.py")


class Service:
    def __init__(self, tmp_path: Path) -> None:
        self.ready = tmp_path / "service.ready"
        self.events = tmp_path / "events"
        self.stderr = tmp_path / "stderr"
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(SERVICE), str(self.ready), str(self.events)],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def ready_info(self) -> dict[str, int]:
        def read() -> dict[str, int] | None:
            assert self.proc.poll() is None, self.stderr.read_text()
            return json.loads(self.ready.read_text()) if self.ready.exists() else None

        return wait_for(read, timeout=60, what="the ready file")

    def wait(self) -> int:
        return self.proc.wait(timeout=60)

    def lines(self) -> list[str]:
        return self.events.read_text().splitlines()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    s = Service(tmp_path)
    try:
        yield s
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(timeout=30)


def _health(port: int) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


def test_ready_file_names_a_serving_port_and_sigterm_shuts_down_in_order(
    service: Service,
) -> None:
    info = service.ready_info()
    assert set(info) == {"port", "metrics_port"} and info["metrics_port"] == -1
    # written only once serving: the port in it answers, and start had not written it yet
    assert _health(info["port"]) == "SERVING"
    assert service.lines() == ["start-returning ready-file-exists=False"]
    service.proc.send_signal(signal.SIGTERM)
    assert service.wait() == 0, service.stderr.read_text()
    assert service.lines() == [
        "start-returning ready-file-exists=False",
        "stop-step serving=SERVING",  # the stop step runs while the server still answers
        "server-stopped grace=1.0",
        "task-cancelled",  # after the server stopped
        "closed-second",  # resources in reverse order of registration
        "closed-first",
    ]


def test_a_crashed_task_stops_the_process_with_its_traceback(service: Service) -> None:
    service.ready_info()
    service.proc.send_signal(signal.SIGUSR1)
    assert service.wait() == 1
    log = service.stderr.read_text()
    assert "task test-background crashed; stopping test-service" in log
    tb = log[log.index("task test-background crashed") :]
    assert "Traceback (most recent call last)" in tb
    assert "RuntimeError: boom from the test task" in tb
    assert service.lines() == [
        "start-returning ready-file-exists=False",
        "stop-step serving=SERVING",
        "server-stopped grace=1.0",
        "closed-second",  # shut down all the same
        "closed-first",
    ]


def test_sigint_stops_like_sigterm(service: Service) -> None:
    service.ready_info()
    service.proc.send_signal(signal.SIGINT)
    assert service.wait() == 0, service.stderr.read_text()
    assert service.lines()[-3:] == ["task-cancelled", "closed-second", "closed-first"]
