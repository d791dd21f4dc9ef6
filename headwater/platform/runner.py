"""The one runner of a service process: ready file, signals, guarded tasks, ordered shutdown.

Every service (broker, controller, coordinator) runs its whole life through
:meth:`ProcessRunner.run`, so start-up and shutdown are written once::

    async def run(settings: Settings) -> int:
        return await ProcessRunner("controller 1", ready_file=settings.ready_file).run(start)

    async def start(proc: ProcessRunner) -> dict[str, Any]:
        etcd = await connect(...)
        proc.closing("etcd", etcd.close)          # closed last (registered first)
        server = await start_server(...)
        proc.serving(server)                      # stopped after the stop steps, with grace
        proc.on_stop("resign", resign, timeout=3, best_effort=True)
        proc.task("controller-events", loop.run())
        return {"port": server.port, "metrics_port": server.metrics_port}

Contract of :meth:`ProcessRunner.run`, in order:

1. SIGTERM and SIGINT set the stop event (so does setting the ``stop`` event given to the
   constructor, for a caller running the service in-process).
2. ``start(proc)`` builds the service inside an :class:`asyncio.TaskGroup`; it registers what
   shutdown needs as soon as each part exists (so a failure half-way through start-up still
   closes what was opened) and returns the ready payload.
3. The ready file, when configured, receives the payload as JSON, written atomically (temp
   file + rename), only once ``start`` returned and no stop was requested meanwhile: a reader
   that sees the file can connect to the ports in it.
4. The process serves until the stop event is set.
5. Shutdown, the same order for every service:

   a. the stop steps (:meth:`on_stop`), in registration order: leaving the cluster
      (controlled shutdown, resign, deregister) while the server still answers;
   b. the gRPC server (:meth:`serving`) stops: health NOT_SERVING, no new calls, in-flight
      calls get ``grace`` seconds;
   c. every background task (:meth:`task`) still running is cancelled and awaited;
   d. the resources (:meth:`closing`) are closed in reverse order of registration.

6. The exit code: 0 after a requested stop; 1 when start-up raised, a background task
   crashed or returned, or a step that is not ``best_effort`` failed.

A background task is guarded: its crash (traceback logged) or its unexpected return stops
the process, which then shuts down as above and exits 1, so a supervisor restarts it rather
than it lingering half-alive. Nothing here knows any particular service.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from headwater import timeouts

log = logging.getLogger(__name__)

#: Seconds in-flight calls get to finish when the server stops (every service's value).
DEFAULT_GRACE_S = 1.0


class Server(Protocol):
    """What the runner needs of a started server (``headwater.platform.server.RunningServer``)."""

    async def stop(self, grace: float = ...) -> None: ...


@dataclass(frozen=True)
class _Step:
    name: str
    fn: Callable[[], Awaitable[object]]
    timeout: float | None
    best_effort: bool
    clean_only: bool = False


def write_ready_file(path: Path, payload: dict[str, Any]) -> None:
    """Publish ``payload`` as JSON at ``path`` atomically (temp file + rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


class ProcessRunner:
    """Runs one service process (see the module doc for the contract).

    Not thread-safe: everything is called on the process's event loop, and the registering
    methods only from ``start`` or the tasks while :meth:`run` runs.
    """

    def __init__(
        self, name: str, *, ready_file: Path | None = None, stop: asyncio.Event | None = None
    ) -> None:
        #: Names the process in log lines, e.g. ``"broker 3"``.
        self.name = name
        self.ready_file = ready_file
        self.stop = stop or asyncio.Event()
        #: True once the process is failing (start-up raised, a task crashed, a step failed).
        self.failed = False
        self._tg: asyncio.TaskGroup | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stop_steps: list[_Step] = []
        self._closers: list[_Step] = []
        self._server: Server | None = None
        self._grace = DEFAULT_GRACE_S

    # ---- registration (from ``start``)

    def task(
        self, name: str, coro: Coroutine[Any, Any, None], *, finishes: bool = False
    ) -> asyncio.Task[None]:
        """Start ``coro`` now as the guarded background task ``name`` (cancelled at shutdown).

        A task runs for the life of the process: its return stops the process as a failure,
        unless ``finishes`` (a one-off step in the background, e.g. reporting ready once some
        condition holds); a raise always does."""
        if self._tg is None:
            coro.close()
            raise RuntimeError("ProcessRunner.task() is only available while run() runs")
        task = self._tg.create_task(self._guard(name, coro, finishes), name=name)
        self._tasks.append(task)
        return task

    def serving(self, server: Server, *, grace: float = DEFAULT_GRACE_S) -> None:
        """The server to stop (with ``grace`` seconds for in-flight calls) after the stop
        steps and before the tasks are cancelled."""
        self._server = server
        self._grace = grace

    def on_stop(
        self,
        name: str,
        fn: Callable[[], Awaitable[object]],
        *,
        timeout: float | None = None,
        best_effort: bool = False,
        clean_only: bool = False,
    ) -> None:
        """A step run at shutdown before the server stops, in registration order.

        ``timeout`` bounds it (a timeout is a failure); a ``best_effort`` step's failure is
        logged without failing the process; a ``clean_only`` step is skipped when the process
        stops because it failed."""
        self._stop_steps.append(_Step(name, fn, timeout, best_effort, clean_only))

    def closing(
        self,
        name: str,
        fn: Callable[[], Awaitable[object]],
        *,
        timeout: float | None = None,
        best_effort: bool = False,
    ) -> None:
        """A resource to close once the tasks ended; closed in reverse order of registration
        (``timeout`` and ``best_effort`` as in :meth:`on_stop`). Every closer runs, whatever
        the others did."""
        self._closers.append(_Step(name, fn, timeout, best_effort))

    def fail(self) -> None:
        """Stop the process and make it exit 1 (a fatal error found outside a task)."""
        self.failed = True
        self.stop.set()

    # ---- the life of the process

    async def run(self, start: Callable[[ProcessRunner], Awaitable[dict[str, Any]]]) -> int:
        """Start, serve until stopped, shut down; returns the exit code (module doc)."""
        loop = asyncio.get_running_loop()
        signals: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            # not available off the main thread or on some platforms: then only ``stop``
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.stop.set)
                signals.append(sig)
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                await self._serve(start)
                log.info("%s stopping", self.name)
                await self._leave()
            self._tg = None
            await self._close()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
        log.info("%s stopped", self.name)
        return 1 if self.failed else 0

    async def _serve(self, start: Callable[[ProcessRunner], Awaitable[dict[str, Any]]]) -> None:
        try:
            payload = await start(self)
        except Exception:
            log.exception("%s failed to start", self.name)
            self.fail()
            return
        if self.stop.is_set():
            log.info("%s asked to stop before serving; no ready file", self.name)
            return
        if self.ready_file is not None:
            write_ready_file(self.ready_file, payload)
        await self.stop.wait()

    async def _leave(self) -> None:
        """Shutdown steps a-c (module doc): stop steps, server, tasks."""
        for step in self._stop_steps:
            if step.clean_only and self.failed:
                log.info("%s: skipping %s (the process failed)", self.name, step.name)
                continue
            await self._run_step("stop step", step)
        if self._server is not None:
            await self._server.stop(self._grace)
        # a task created just before (start-up failed or stopped at once) takes its first
        # step now, so its coroutine sees the cancellation instead of being dropped unawaited
        await asyncio.sleep(0)
        for task in self._tasks:
            task.cancel()
        # leaving the TaskGroup awaits them

    async def _close(self) -> None:
        """Shutdown step d: every resource, last registered first."""
        for step in reversed(self._closers):
            await self._run_step("closing", step)

    async def _run_step(self, what: str, step: _Step) -> None:
        try:
            await timeouts.wait_for(step.fn(), step.timeout)
        except Exception as exc:
            if step.best_effort:
                log.warning("%s: %s %s failed: %r", self.name, what, step.name, exc)
            else:
                log.exception("%s: %s %s failed", self.name, what, step.name)
                self.failed = True

    async def _guard(self, name: str, coro: Coroutine[Any, Any, None], finishes: bool) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            log.critical("task %s crashed; stopping %s", name, self.name, exc_info=True)
        else:
            if finishes:
                return
            log.critical("task %s exited unexpectedly; stopping %s", name, self.name)
        self.fail()
