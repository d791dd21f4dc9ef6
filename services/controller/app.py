"""The controller process: etcd connection, gRPC server, election and event loop.

The process runs through :class:`headwater.platform.runner.ProcessRunner` (signals, ready file,
shutdown order). Long-lived tasks, started in :func:`_start` as the runner's guarded tasks
(a task that dies is logged and stops the process with exit code 1, so a supervisor restarts
it rather than it lingering half-alive):

* ``controller-events`` — the event loop that owns the cluster state (``events``);
* ``controller-election`` — campaigns / watches the leader key (``election``);
* started by the event loop per active term: ``broker-watch``, ``rebalance-timer``
  (automatic preferred-leader election, unless disabled) and one
  ``controller-link-<id>-<epoch>`` per broker.

The server is started first with port 0 allowed, because the bound port goes into the leader
key; the ready file (optional) receives ``{"port": P, "metrics_port": M}`` once serving.
Stop (SIGTERM/SIGINT): resign (revoking the lease hands over to a standby at once) and stop
campaigning, stop the server, cancel the tasks, close the broker links and etcd.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headwater import timeouts
from headwater.platform.auth.interceptor import ServerAuth
from headwater.platform.auth.service import attach_service
from headwater.platform.limits import DEFAULT_LIMITS, RequestLimits
from headwater.platform.process import connect_etcd
from headwater.platform.runner import ProcessRunner
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


async def run(settings: Settings, stop: asyncio.Event | None = None) -> int:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT), then resign and shut down; returns
    the exit code (headwater/platform/runner.py)."""
    name = f"controller {settings.controller_id}"
    proc = ProcessRunner(name, ready_file=settings.ready_file, stop=stop)
    return await proc.run(functools.partial(_start, settings))


async def _start(settings: Settings, proc: ProcessRunner) -> dict[str, Any]:
    etcd = await connect_etcd(settings.etcd, security=settings.security)
    proc.closing("etcd", etcd.close)
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
    proc.closing("controller", controller.close)
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
    proc.serving(server)
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
    proc.task("controller-events", controller.run())
    campaign = proc.task("controller-election", election.run())

    async def resign() -> None:
        # revoking the lease hands leadership to a standby at once; the election task goes
        # with it, or it would campaign again while the server drains
        try:
            await timeouts.wait_for(election.resign_and_stop(), 3)
        finally:
            campaign.cancel()

    proc.on_stop("resign", resign, best_effort=True)
    log.info("controller %d serving on %s:%d", settings.controller_id, settings.host, server.port)
    return {"port": server.port, "metrics_port": server.metrics_port}
