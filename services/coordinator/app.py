"""The coordinator process: etcd, brokers, the offsets topic, ownership, gRPC server, metrics.

Start order in :func:`_start`: connect to etcd; wait for at least one registered broker (the
bootstrap list comes from ``/headwater/brokers/ids/``); create ``__consumer_offsets`` and
``__transaction_state`` through the controller when absent (compacted, RF = min(configured,
live brokers), min.insync.replicas = min(2, RF)); start the gRPC server (port 0 allowed;
GroupCoordinator and TransactionCoordinator); register under a lease
(:class:`~services.coordinator.registration.CoordinatorRegistration`) and take partitions
(two :class:`Ownership`: offsets partitions, and transaction-state partitions under
``/headwater/coordinators/txn_owners/``); write the ready file ``{"port", "metrics_port"}``.

A lost etcd lease (etcd paused or unreachable for a whole TTL) does not stop the process: the
ownerships give every partition up at once (NOT_COORDINATOR) and the
``coordinator-registration`` task registers again under a new lease, after which the
partitions are taken again with new epochs.

The process runs through :class:`headwater.platform.runner.ProcessRunner` (signals, ready file,
shutdown order). Long-lived tasks (the runner's guarded tasks: one that dies stops the process
with exit code 1): ``coordinator-registration``
(re-registers after a lease loss), ``coordinator-ownership`` (owns
the partition runtimes, each its own task), ``coordinator-txn-ownership`` (the same for
``__transaction_state``: txn/runtime.py) and ``coordinator-metrics`` (every
``metrics_interval_s`` refreshes headwater_coordinator_group_lag / _group_members from each
owned partition's snapshot and the partitions' log ends) and ``coordinator-topic-watch``
(every ``topic_watch_interval_s`` rebalances owned groups whose subscribed topics changed
partition count: :mod:`topic_watch`).

Stop (SIGTERM/SIGINT): deregister (revoking the lease lets peers take the partitions over at
once), stop the server, cancel the tasks (the ownerships release their runtimes), close the
producer, the admin client, the marker connections and etcd.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headwater import errors
from headwater.client import AsyncAdminClient, AsyncProducer
from headwater.client.connection import ConnectionPool, parse_bootstrap
from headwater.client.metadata import Metadata
from headwater.client.security import ClientSecurity, set_default_security
from headwater.platform import etcd as hetcd
from headwater.platform.auth.interceptor import ServerAuth
from headwater.platform.auth.service import attach_service
from headwater.platform.limits import DEFAULT_LIMITS, RequestLimits
from headwater.platform.process import connect_etcd
from headwater.platform.producer_ids import ProducerIdAllocator
from headwater.platform.runner import ProcessRunner
from headwater.platform.security_flags import PLAINTEXT, ServerSecurity
from headwater.platform.server import start_server
from services.coordinator import metrics
from services.coordinator.group_handlers import SnapshotGroups
from services.coordinator.handlers import PartitionLostError
from services.coordinator.ownership import TXN_OWNERS_PREFIX, Ownership
from services.coordinator.registration import CoordinatorRegistration
from services.coordinator.runtime import OFFSETS_TOPIC, PartitionRuntime
from services.coordinator.servicer import GroupCoordinatorServicer, measure_ends, register
from services.coordinator.topic_watch import WATCH_INTERVAL_S, watch_partition_counts
from services.coordinator.txn import servicer as txn_servicer
from services.coordinator.txn.handlers import DEFAULT_MAX_TIMEOUT_MS
from services.coordinator.txn.markers import MarkerWriter
from services.coordinator.txn.runtime import TXN_TOPIC, TxnRuntime

log = logging.getLogger(__name__)

BROKERS_PREFIX = "/headwater/brokers/ids/"


@dataclass(frozen=True)
class Settings:
    coordinator_id: int
    host: str
    port: int
    etcd: str
    metrics_port: int | None
    ready_file: Path | None
    offsets_topic_partitions: int = 12
    offsets_topic_replication_factor: int = 3
    lease_ttl: int = 5
    metrics_interval_s: float = 5.0
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    topic_watch_interval_s: float = WATCH_INTERVAL_S
    transaction_state_partitions: int = 8
    transaction_max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS
    #: TLS / mTLS / authorizer settings (the shared security flags; plaintext by default).
    security: ServerSecurity = PLAINTEXT
    #: Request limits of every RPC (headwater/platform/limits.py).
    limits: RequestLimits = DEFAULT_LIMITS


async def broker_bootstrap(etcd: hetcd.Etcd, timeout_s: float = 60.0) -> list[str]:
    """``host:port`` of every registered broker, waiting (bounded) for at least one."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        snap = await etcd.get_prefix(BROKERS_PREFIX)
        out = []
        for kv in snap.items:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                v = json.loads(kv.value)
                out.append(f"{v['host']}:{int(v['port'])}")
        if out:
            return out
        if asyncio.get_running_loop().time() >= deadline:
            raise errors.BrokerNotAvailableError("no broker registered in etcd")
        await asyncio.sleep(0.5)


async def ensure_offsets_topic(admin: AsyncAdminClient, settings: Settings, brokers: int) -> int:
    """Create the offsets topic if absent; returns its partition count."""
    return await ensure_internal_topic(
        admin, OFFSETS_TOPIC, settings.offsets_topic_partitions, settings, brokers
    )


async def ensure_internal_topic(
    admin: AsyncAdminClient, topic: str, partitions: int, settings: Settings, brokers: int
) -> int:
    """Create a compacted internal topic if absent (RF as the offsets topic's); returns its
    partition count (the existing one when it was there)."""
    rf = max(1, min(settings.offsets_topic_replication_factor, brokers))
    deadline = asyncio.get_running_loop().time() + 60.0
    while True:
        try:
            await admin.create_topic(
                topic,
                partitions=partitions,
                replication_factor=rf,
                configs={
                    "cleanup.policy": "compact",
                    "min.insync.replicas": str(min(2, rf)),
                    "segment.bytes": str(1024 * 1024),
                },
            )
            log.info("created %s (RF %d)", topic, rf)
            break
        except errors.TopicAlreadyExistsError:
            break
        except (errors.UnsupportedVersionError, errors.NetworkError) as exc:
            # No controller known yet (the brokers have not had UpdateMetadata, so the admin
            # client fell back to asking a broker): wait for one, within the deadline.
            if asyncio.get_running_loop().time() >= deadline:
                raise
            log.info("creating %s: no controller reachable yet (%s); retrying", topic, exc)
            await asyncio.sleep(0.5)
    while True:  # the brokers learn of a new topic through UpdateMetadata, a little later
        try:
            for d in await admin.describe_topics([topic]):
                if d.partitions:
                    return len(d.partitions)
        except errors.UnknownTopicOrPartitionError:
            if asyncio.get_running_loop().time() >= deadline:
                raise
        await asyncio.sleep(0.2)


async def refresh_metrics(ownership: Ownership, admin: AsyncAdminClient, every_s: float) -> None:
    """Refresh the lag and member gauges from the owned partitions (runs until cancelled)."""
    shown: set[tuple[str, ...]] = set()
    while True:
        await asyncio.sleep(every_s)
        now: set[tuple[str, ...]] = set()
        for rt in list(ownership.runtimes.values()):
            if not rt.loaded.is_set():
                continue
            try:
                snaps = await rt.submit(SnapshotGroups())
            except PartitionLostError:
                continue
            for s in snaps:
                metrics.GROUP_MEMBERS.labels(s.group_id).set(s.members)
                now.add((s.group_id,))
                ends = await measure_ends(admin, sorted(s.offsets))
                for (topic, p), committed in s.offsets.items():
                    if (topic, p) in ends:
                        lag = max(0, ends[(topic, p)][1] - committed)
                        metrics.GROUP_LAG.labels(s.group_id, topic, str(p)).set(lag)
                        now.add((s.group_id, topic, str(p)))
        for labels in shown - now:
            with contextlib.suppress(KeyError):
                (metrics.GROUP_MEMBERS if len(labels) == 1 else metrics.GROUP_LAG).remove(*labels)
        shown = now


async def run(settings: Settings, stop: asyncio.Event | None = None) -> int:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT), then deregister and shut down; returns
    the exit code (headwater/platform/runner.py)."""
    name = f"coordinator {settings.coordinator_id}"
    proc = ProcessRunner(name, ready_file=settings.ready_file, stop=stop)
    return await proc.run(functools.partial(_start, settings))


async def _start(settings: Settings, proc: ProcessRunner) -> dict[str, Any]:
    etcd = await connect_etcd(settings.etcd, security=settings.security)
    proc.closing("etcd", etcd.close)
    auth = ServerAuth(settings.security)
    await attach_service(auth, etcd)  # before any client below: their calls carry its token
    peer = settings.security.client_security()  # brokers and controller, as this service
    # every client of this process (partition runtimes' consumers too) as this service: TLS with
    # its certificate, or plaintext; never a client-side $HEADWATER_SECURITY_CONFIG
    set_default_security(peer if peer is not None else ClientSecurity())
    brokers = await broker_bootstrap(etcd)
    bootstrap = ",".join(brokers)
    pool = ConnectionPool(security=peer)
    proc.closing("marker connections", pool.close, best_effort=True)
    admin = AsyncAdminClient(bootstrap, request_timeout_ms=5_000, security=peer)
    proc.closing("admin client", admin.close, best_effort=True)
    partitions = await ensure_offsets_topic(admin, settings, len(brokers))
    txn_partitions = await ensure_internal_topic(
        admin, TXN_TOPIC, settings.transaction_state_partitions, settings, len(brokers)
    )
    producer = _internal_producer(settings, bootstrap, peer)
    await producer.start()
    proc.closing("producer", producer.close, timeout=3, best_effort=True)
    ownership: Ownership | None = None
    txn_ownership: Ownership | None = None
    servicer = GroupCoordinatorServicer(etcd, lambda: ownership, admin, partitions, txn_partitions)
    tservicer = txn_servicer.TransactionCoordinatorServicer(lambda: txn_ownership, txn_partitions)
    markers = MarkerWriter(pool, Metadata(pool, parse_bootstrap(bootstrap)), etcd, partitions)
    allocator = ProducerIdAllocator(etcd)
    server = await start_server(
        host=settings.host,
        port=settings.port,
        register=[register(servicer), txn_servicer.register(tservicer)],
        service="coordinator",
        metrics_port=settings.metrics_port,
        security=settings.security,
        auth=auth,
        limits=settings.limits,
    )
    proc.serving(server)
    metrics_url = (
        f"http://{settings.host}:{server.metrics_port}/metrics" if server.metrics_port > 0 else ""
    )

    def make_runtime(p: int, epoch: int) -> PartitionRuntime:
        return PartitionRuntime(
            partition=p,
            epoch=epoch,
            coordinator_id=settings.coordinator_id,
            producer=producer,
            bootstrap=bootstrap,
            offsets_retention_ms=settings.offsets_retention_ms,
            on_rebalance=metrics.observe_rebalance,
        )

    def make_txn_runtime(p: int, epoch: int) -> TxnRuntime:
        return TxnRuntime(
            partition=p,
            epoch=epoch,
            coordinator_id=settings.coordinator_id,
            producer=producer,
            bootstrap=bootstrap,
            allocator=allocator,
            markers=markers,
            max_timeout_ms=settings.transaction_max_timeout_ms,
        )

    registration = CoordinatorRegistration(
        etcd,
        settings.coordinator_id,
        {
            "coordinator_id": settings.coordinator_id,
            "host": settings.host,
            "port": server.port,
            "metrics_url": metrics_url,
        },
        ttl=settings.lease_ttl,
    )
    ownership = Ownership(
        etcd,
        coordinator_id=settings.coordinator_id,
        registration=registration,
        partitions=partitions,
        make_runtime=make_runtime,
    )
    txn_ownership = Ownership(
        etcd,
        coordinator_id=settings.coordinator_id,
        registration=registration,
        partitions=txn_partitions,
        make_runtime=make_txn_runtime,
        owners_prefix=TXN_OWNERS_PREFIX,
        task_prefix="coordinator-txn-partition",
    )
    await registration.register()
    # revoking the lease lets peers take the partitions over at once
    proc.on_stop("deregister", registration.close, timeout=3, best_effort=True)
    # The tasks, one line each (module doc):
    proc.task("coordinator-registration", registration.run())
    proc.task("coordinator-ownership", ownership.run())
    proc.task("coordinator-txn-ownership", txn_ownership.run())
    proc.task("coordinator-metrics", refresh_metrics(ownership, admin, settings.metrics_interval_s))
    proc.task(
        "coordinator-topic-watch",
        watch_partition_counts(ownership, admin, settings.topic_watch_interval_s),
    )
    log.info("coordinator %d serving on %s:%d", settings.coordinator_id, settings.host, server.port)
    return {"port": server.port, "metrics_port": server.metrics_port}


def _internal_producer(
    settings: Settings, bootstrap: str, peer: ClientSecurity | None
) -> AsyncProducer:
    """The one producer of every partition runtime's appends (not started).

    Not idempotent: an idempotent producer whose sequenced batch expires (its outcome is
    unknown) enters a failed state for good, and a killed leader of an internal partition
    fails over no sooner than the broker lease (10 s) = the delivery timeout: one failover
    left this shared producer failing every later append of every partition of the process
    (each runtime gave up, reloaded, failed its epoch marker, forever; the transaction
    bounce test's copier waited on it for 120 s). A runtime gives its partition up on a
    failed append and reads back what it wrote, one request in flight keeps the order, and
    a record duplicated by a retry restates the same whole value: nothing needs sequences.
    """
    return AsyncProducer(
        bootstrap,
        acks="all",
        enable_idempotence=False,
        linger_ms=0,
        max_in_flight=1,
        delivery_timeout_ms=10_000,
        request_timeout_ms=5_000,
        client_id=f"coordinator-{settings.coordinator_id}",
        security=peer,
    )
