"""The controller process: etcd connection, gRPC server, election and event loop.

Long-lived tasks, all started in :func:`run` and guarded (a task that dies is logged and
stops the process, so a supervisor restarts it rather than it lingering half-alive):

* ``controller-events`` — the event loop that owns the cluster state (``events``);
* ``controller-election`` — campaigns / watches the leader key (``election``);
* per active term: ``broker-watch``, ``rebalance-timer`` (automatic preferred-leader
  election, unless disabled) and one ``controller-link-<id>-<epoch>`` per broker.

The server is started first with port 0 allowed, because the bound port goes into the leader
key; the ready file (optional) receives ``{"port": P, "metrics_port": M}`` once serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass
from pathlib import Path

from headwater import timeouts
from headwater.platform.auth.interceptor import ServerAuth
from headwater.platform.auth.service import attach_service
from headwater.platform.limits import DEFAULT_LIMITS, RequestLimits
from headwater.platform.process import connect_etcd, write_ready_file
from headwater.platform.security_flags import PLAINTEXT, ServerSecurity
from headwater.platform.server import start_server
from services.controller import events
from services.controller.broker_channels import BrokerChannels
from services.controller.election import Election
from services.controller.service import ControllerService, register

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    controller_id: int
    host: str
    port: int
    etcd: str
    metrics_port: int | None
    ready_file: Path | None
    lease_ttl: int = 5
    auto_leader_rebalance: bool = True
    #: the liveness stream per broker (services.controller.broker_channels); off: lease only
    crash_detection: bool = True
    imbalance_check_interval_s: float = 300.0
    imbalance_percent: float = 10.0
    #: TLS / mTLS / authorizer settings (the shared security flags; plaintext by default).
    security: ServerSecurity = PLAINTEXT
    #: Request limits of every RPC (headwater/platform/limits.py).
    limits: RequestLimits = DEFAULT_LIMITS


async def run(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT), then resign and shut down."""
    stop = stop or asyncio.Event()
    aloop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            aloop.add_signal_handler(sig, stop.set)

    etcd = await connect_etcd(settings.etcd, security=settings.security)
    auth = ServerAuth(settings.security)
    await attach_service(auth, etcd)  # token key, ACLs, the internal identity
    controller = events.ControllerLoop(
        etcd,
        controller_id=settings.controller_id,
        host=settings.host,
        port=settings.port,
        auto_leader_rebalance=settings.auto_leader_rebalance,
        crash_detection=settings.crash_detection,
        imbalance_check_interval_s=settings.imbalance_check_interval_s,
        imbalance_percent=settings.imbalance_percent,
    )
    peer = settings.security.client_security()
    if peer is not None:  # controller -> broker links over TLS, with this controller's identity
        controller.channels = BrokerChannels(peer.channel_credentials())
    election: Election | None = None  # needs the bound port; created after the server
    servicer = ControllerService(controller, lambda: election.leader if election else None)
    server = await start_server(
        host=settings.host,
        port=settings.port,
        register=[register(servicer)],
        service="controller",
        metrics_port=settings.metrics_port,
        security=settings.security,
        auth=auth,
        limits=settings.limits,
    )
    controller.port = server.port
    election = Election(
        etcd,
        controller_id=settings.controller_id,
        host=settings.host,
        port=server.port,
        on_elected=lambda epoch: controller.post(events.BecameActive(epoch)),
        on_resigned=lambda: controller.post(events.Resigned()),
        lease_ttl=settings.lease_ttl,
    )
    tasks = [
        asyncio.create_task(controller.run(), name="controller-events"),
        asyncio.create_task(election.run(), name="controller-election"),
    ]
    for task in tasks:
        task.add_done_callback(lambda t: _fatal(t, stop))
    if settings.ready_file is not None:
        write_ready_file(
            settings.ready_file, {"port": server.port, "metrics_port": server.metrics_port}
        )
    log.info("controller %d serving on %s:%d", settings.controller_id, settings.host, server.port)
    try:
        await stop.wait()
    finally:
        log.info("controller %d stopping", settings.controller_id)
        with contextlib.suppress(Exception):
            await timeouts.wait_for(election.resign_and_stop(), 3)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await controller.close()
        await server.stop(grace=1.0)
        await etcd.close()


def _fatal(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    log.critical("task %s ended (%r); stopping the controller", task.get_name(), exc, exc_info=exc)
    stop.set()
