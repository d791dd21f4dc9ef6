"""A minimal service process run through ProcessRunner, for tests/rpc/test_runner_process.py.

    python tests/rpc/runner_service.py READY_FILE EVENTS_FILE

It serves gRPC health on a real server (port 0), has one stop step, one background task and
two resources, and appends one line per life event to EVENTS_FILE (flushed at once):
``start-returning ready-file-exists=<bool>``, ``stop-step serving=<health status>``,
``server-stopped grace=<s>``, ``task-cancelled``, ``closed-second``, ``closed-first``.
SIGUSR1 makes the background task raise ``RuntimeError("boom from the test task")``. The
exit code is the runner's.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.platform.runner import ProcessRunner
from headwater.platform.server import start_server


def main(ready_file: Path, events_file: Path) -> int:
    logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")

    def event(line: str) -> None:
        with events_file.open("a") as f:
            f.write(line + "\n")

    async def health_status(port: int) -> str:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            resp = await health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5
            )
            return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    async def start(proc: ProcessRunner) -> dict[str, Any]:
        async def close(name: str) -> None:
            event(f"closed-{name}")

        proc.closing("first", lambda: close("first"))
        server = await start_server(
            host="127.0.0.1", port=0, register=[], service="runner-test", metrics_port=None
        )

        class RecordedServer:
            async def stop(self, grace: float = 1.0) -> None:
                await server.stop(grace)
                event(f"server-stopped grace={grace}")

        proc.serving(RecordedServer())
        proc.closing("second", lambda: close("second"))

        async def stop_step() -> None:
            event(f"stop-step serving={await health_status(server.port)}")

        proc.on_stop("leave", stop_step)
        crash = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, crash.set)

        async def background() -> None:
            try:
                await crash.wait()
            except asyncio.CancelledError:
                event("task-cancelled")
                raise
            raise RuntimeError("boom from the test task")

        proc.task("test-background", background())
        event(f"start-returning ready-file-exists={ready_file.exists()}")
        return {"port": server.port, "metrics_port": server.metrics_port}

    return asyncio.run(ProcessRunner("test-service", ready_file=ready_file).run(start))


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
