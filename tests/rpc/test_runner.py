"""ProcessRunner on one event loop, no processes: the contract of headwater/platform/runner.py
(ready file, shutdown order, exit codes, guarded tasks, failing steps)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from headwater import timeouts
from headwater.platform.runner import ProcessRunner, write_ready_file
from tests.helpers.wait import async_wait_for

pytestmark = pytest.mark.fast

PAYLOAD = {"port": 1234, "metrics_port": 5678}


class FakeServer:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def stop(self, grace: float = 1.0) -> None:
        self.events.append(f"server stop grace={grace}")


def _recorder(events: list[str], name: str) -> Callable[[], Awaitable[None]]:
    async def step() -> None:
        events.append(name)

    return step


async def _forever(events: list[str], name: str) -> None:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        events.append(f"{name} cancelled")
        raise


def _run(
    start: Callable[[ProcessRunner], Awaitable[dict[str, Any]]],
    *,
    ready_file: Path | None = None,
    stop_when: Callable[[ProcessRunner], Coroutine[Any, Any, None]] | None = None,
) -> int:
    """Run ``start`` through a runner; ``stop_when`` (a task) decides when to stop it."""

    async def main() -> int:
        proc = ProcessRunner("svc", ready_file=ready_file)
        helper = asyncio.create_task(stop_when(proc)) if stop_when else None
        try:
            return await timeouts.wait_for(proc.run(start), 30)
        finally:
            if helper is not None:
                helper.cancel()

    return asyncio.run(main())


async def _stop_once_ready(proc: ProcessRunner, ready_file: Path, seen: list[bool]) -> None:
    async def written() -> bool:
        return ready_file.exists()

    await async_wait_for(written, timeout=20, what="the ready file")
    seen.append(True)
    proc.stop.set()


def test_stop_runs_the_shutdown_steps_in_order(tmp_path: Path) -> None:
    events: list[str] = []
    ready = tmp_path / "svc.ready"

    async def start(proc: ProcessRunner) -> dict[str, Any]:
        proc.closing("etcd", _recorder(events, "close etcd"))
        proc.serving(FakeServer(events), grace=2.5)
        proc.closing("logs", _recorder(events, "close logs"))
        proc.on_stop("leave", _recorder(events, "leave"))
        proc.on_stop("resign", _recorder(events, "resign"))
        proc.task("t1", _forever(events, "t1"))
        proc.task("t2", _forever(events, "t2"))
        events.append(f"start returns (ready file: {ready.exists()})")
        return PAYLOAD

    seen: list[bool] = []
    code = _run(start, ready_file=ready, stop_when=lambda p: _stop_once_ready(p, ready, seen))
    assert code == 0 and seen == [True]
    assert json.loads(ready.read_text()) == PAYLOAD
    assert events == [
        "start returns (ready file: False)",
        "leave",
        "resign",
        "server stop grace=2.5",
        "t1 cancelled",
        "t2 cancelled",
        "close logs",
        "close etcd",
    ]


def test_a_crashed_task_stops_the_process_with_its_traceback_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[str] = []

    async def crash() -> None:
        await asyncio.sleep(0)
        raise ValueError("task broke")

    async def start(proc: ProcessRunner) -> dict[str, Any]:
        proc.serving(FakeServer(events))
        proc.closing("etcd", _recorder(events, "close etcd"))
        proc.on_stop("controlled shutdown", _recorder(events, "controlled"), clean_only=True)
        proc.on_stop("resign", _recorder(events, "resign"))
        proc.task("other", _forever(events, "other"))
        proc.task("crasher", crash())
        return PAYLOAD

    with caplog.at_level(logging.INFO, logger="headwater.platform.runner"):
        assert _run(start) == 1
    crashed = [r for r in caplog.records if "task crasher crashed" in r.getMessage()]
    assert len(crashed) == 1 and crashed[0].levelno == logging.CRITICAL
    assert crashed[0].exc_info is not None
    assert isinstance(crashed[0].exc_info[1], ValueError)
    assert "task broke" in caplog.text and "Traceback" in caplog.text
    # the clean-only step is skipped after a failure; the rest of shutdown runs
    assert events == ["resign", "server stop grace=1.0", "other cancelled", "close etcd"]


def test_a_task_that_returns_is_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    async def done_early() -> None:
        await asyncio.sleep(0)

    async def start(proc: ProcessRunner) -> dict[str, Any]:
        proc.task("quitter", done_early())
        return PAYLOAD

    assert _run(start) == 1
    assert "task quitter exited unexpectedly; stopping svc" in caplog.text


def test_a_failed_start_closes_what_was_opened_and_writes_no_ready_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[str] = []
    ready = tmp_path / "svc.ready"

    async def start(proc: ProcessRunner) -> dict[str, Any]:
        proc.closing("etcd", _recorder(events, "close etcd"))
        proc.task("t", _forever(events, "t"))
        raise ConnectionError("etcd unreachable")

    assert _run(start, ready_file=ready) == 1
    assert not ready.exists()
    assert events == ["t cancelled", "close etcd"]
    assert "svc failed to start" in caplog.text and "etcd unreachable" in caplog.text


def test_a_stop_requested_during_start_writes_no_ready_file(tmp_path: Path) -> None:
    ready = tmp_path / "svc.ready"

    async def start(proc: ProcessRunner) -> dict[str, Any]:
        proc.stop.set()  # as SIGTERM arriving while start-up still runs
        return PAYLOAD

    assert _run(start, ready_file=ready) == 0
    assert not ready.exists()


def test_failing_steps_every_closer_runs(caplog: pytest.LogCaptureFixture) -> None:
    events: list[str] = []

    async def broken() -> None:
        raise OSError("disk gone")

    async def slow() -> None:
        await asyncio.Event().wait()

    async def start(proc: ProcessRunner) -> dict[str, Any]:
        proc.closing("first", _recorder(events, "close first"))
        proc.closing("broken", broken)
        proc.closing("last", _recorder(events, "close last"))
        proc.on_stop("slow resign", slow, timeout=0.05, best_effort=True)
        proc.stop.set()
        return PAYLOAD

    # a best-effort step's timeout is only logged; a failing closer fails the exit code
    assert _run(start) == 1
    assert events == ["close last", "close first"]
    assert "closing broken failed" in caplog.text and "disk gone" in caplog.text
    assert "stop step slow resign failed: TimeoutError()" in caplog.text


def test_best_effort_failures_keep_exit_code_zero() -> None:
    async def broken() -> None:
        raise OSError("already closed")

    async def start(proc: ProcessRunner) -> dict[str, Any]:
        proc.closing("producer", broken, best_effort=True)
        proc.on_stop("deregister", broken, best_effort=True)
        proc.stop.set()
        return PAYLOAD

    assert _run(start) == 0


def test_task_outside_run_is_refused() -> None:
    async def coro() -> None:
        return None

    with pytest.raises(RuntimeError):
        ProcessRunner("svc").task("t", coro())


def test_write_ready_file_replaces_atomically(tmp_path: Path) -> None:
    ready = tmp_path / "x.ready"
    ready.write_text("old")
    write_ready_file(ready, PAYLOAD)
    assert json.loads(ready.read_text()) == PAYLOAD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.ready"]  # no temp file left
