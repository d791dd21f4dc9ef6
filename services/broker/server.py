"""The broker process: wiring, long-lived tasks, registration and shutdown.

Everything runs on one asyncio loop (``asyncio.run(serve(...))``), its life (signals, ready
file, guarded tasks, shutdown order) run by :class:`headwater.platform.runner.ProcessRunner`.
Who owns what:

* gRPC server (``headwater.platform.server.start_server``): one task per RPC; handlers read and
  change state only through the ``ReplicaManager`` and ``MetadataCache`` (on the loop).
* ``ReplicaManager``: hosted partitions, controller and broker epochs; control RPCs are
  serialised by its control lock. Each ``Partition`` serialises its own appends.
* ``LogManager`` (storage): log directories and logs; its blocking calls run in worker threads.
* Named guarded tasks, the process runner's (``headwater.platform.runner``: a failure is logged
  and stops the broker with exit code 1 rather than dying silently):

  - ``broker-registration``: re-registers in etcd when the lease is lost
    (:class:`services.broker.registration.Registration`); the lease keepalive itself is a task
    owned by the etcd adapter's ``LeaseKeeper``;
  - ``broker-config``: watches ``/headwater/configs/brokers/`` and applies the dynamic broker
    configs (topic defaults) to hosted partitions (``dynamic_config.py``);
  - ``broker-retention``: every ``--log-retention-check-interval-ms``, deletes expired
    segments;
  - ``broker-flush``: every ``FLUSH_INTERVAL_S``, fsyncs logs whose flush policy is due and
    writes changed leader-epoch files behind, looking only at logs changed since the last
    pass (``LogManager.flush_pass``);
  - ``broker-metrics``: every ``LOG_SHAPE_INTERVAL_S``, sets the log-shape gauges that
    changed (the replication-health gauges are computed when scraped);
  - ``broker-log-cleaner``: every ``--log-cleaner-backoff-ms``, one compaction pass over each
    hosted log whose cleanup.policy includes compact, one log at a time in a worker thread,
    bounded by the partition's high watermark and throttled to
    ``--log-cleaner-io-max-bytes-per-second`` (``storage/cleaner.py``);
  - ``broker-hw-checkpoint``: every ``HW_CHECKPOINT_INTERVAL_S``, writes each log directory's
    ``replication-offset-checkpoint`` (also written at shutdown);
  - ``broker-isr-shrink``: every ``replica.lag.time.max.ms / 2``, proposes removing lagging
    followers from the ISRs this broker leads (``replication/isr.py``);
  - ``broker-alter-partition``: sends ISR proposals to the controller (AlterPartition);
  - ``broker-quota-configs``: keeps the quota manager's configs equal to etcd's
    ``/headwater/configs/`` (``quotas/watcher.py``); ``broker-quota-metrics``: refreshes the
    quota rate gauges once per quota window;
  - ``broker-fetcher-<leader>``: one follower fetch session per leader broker, created on
    demand by the replica manager's ``FetcherManager`` (``replication/fetcher.py``).

Start order: log manager -> gRPC server (port bound) -> etcd connection (the producer-id
allocator of ``Broker.InitProducerId`` shares it with registration) -> stray logs deleted
(topics deleted or re-created while this broker was away: ``stray_replicas.py``) -> etcd
registration (the controller may now send LeaderAndIsr) -> ready file. Health reports
NOT_SERVING until the controller's first UpdateMetadata has arrived (``broker-health``), and
Metadata answers BROKER_NOT_AVAILABLE until then (``metadata_cache.py``). Stop order
(SIGTERM/SIGINT, through the runner): controlled shutdown (the controller moves leaderships
away; skipped after a failure), health NOT_SERVING and stop the gRPC server (in-flight calls
get ``STOP_GRACE_S``), cancel the tasks, close every log (clean-shutdown marker), revoke the
lease (the controller sees the broker leave at once), close etcd.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from headwater.batch.codec import now_ms
from headwater.errors import HeadwaterError
from headwater.platform import etcd as hetcd
from headwater.platform.auth.interceptor import ServerAuth
from headwater.platform.auth.service import attach_service
from headwater.platform.cluster_layout import read_controller_epoch
from headwater.platform.dynamic_config import BrokerConfig
from headwater.platform.limits import DEFAULT_LIMITS, RequestLimits
from headwater.platform.producer_ids import ProducerIdAllocator
from headwater.platform.runner import ProcessRunner
from headwater.platform.security_flags import PLAINTEXT, ServerSecurity
from headwater.platform.server import RunningServer, start_server
from services.broker import descriptors, group_stream, metrics, servicer, stray_replicas
from services.broker.handlers.init_producer_id import ProducerIds
from services.broker.metadata_cache import MetadataCache
from services.broker.quotas import watcher as quota_watcher
from services.broker.quotas.entities import static_window
from services.broker.quotas.manager import QuotaManager
from services.broker.registration import LEASE_TTL_S, Registration
from services.broker.replica_manager import ReplicaManager
from services.broker.replication.peers import Peers
from services.broker.replication.shutdown import controlled_shutdown
from services.broker.storage import LogManager, cleaner, fileio, segment

log = logging.getLogger(__name__)

RETENTION_INTERVAL_S = 30.0
FLUSH_INTERVAL_S = 1.0
LOG_SHAPE_INTERVAL_S = 15.0
STOP_GRACE_S = 1.0
HW_CHECKPOINT_INTERVAL_S = 5.0  # Kafka: replica.high.watermark.checkpoint.interval.ms


@dataclass(frozen=True)
class BrokerSettings:
    broker_id: int
    host: str
    port: int
    data_dirs: list[Path]
    etcd: str
    metrics_port: int
    rack: str = ""
    ready_file: Path | None = None
    #: broker id -> "host:port" used instead of the registered address, for broker-to-broker
    #: connections only (``--peer-override``).
    peer_overrides: dict[int, str] = field(default_factory=dict)
    replica_lag_time_max_ms: int = 10_000
    #: Bound of open index files (``--index-files-open-max``; descriptors.index_files_bound).
    index_files_open_max: int = descriptors.INDEX_FILES_OPEN_MAX
    #: Page-cache window of every log segment (``--log-page-cache-window-bytes``; 0: off).
    page_cache_window_bytes: int = 0
    controlled_shutdown_s: float = 10.0
    #: TTL of the registration lease (``--session-timeout-s``)
    session_timeout_s: int = LEASE_TTL_S
    #: Pause between two log-cleaner passes (``--log-cleaner-backoff-ms``).
    log_cleaner_backoff_ms: int = 15_000
    #: Cleaner read+write throttle (``--log-cleaner-io-max-bytes-per-second``); None: none.
    log_cleaner_io_max_bytes_per_s: float | None = None
    #: Pause between two retention passes (``--log-retention-check-interval-ms``).
    retention_check_interval_ms: int = int(RETENTION_INTERVAL_S * 1000)
    #: Static broker configs (``--config``): topic defaults and the quota window.
    static_configs: dict[str, str] = field(default_factory=dict)
    #: TLS / mTLS / authorizer settings (the shared security flags; plaintext by default).
    security: ServerSecurity = PLAINTEXT
    #: Request limits of every RPC (headwater/platform/limits.py).
    limits: RequestLimits = DEFAULT_LIMITS
    #: Bounds of the group streams this broker serves (``--group-stream-*``).
    group_stream: group_stream.StreamLimits = field(default_factory=group_stream.StreamLimits)
    #: Address registered for clients and peers when it differs from the bind address, e.g.
    #: a Kubernetes pod's stable DNS name (``--advertised-host``/``--advertised-port``);
    #: None: ``host`` and the bound port.
    advertised_host: str | None = None
    advertised_port: int | None = None

    def registered_configs(self) -> dict[str, str]:
        """The start-up configs reported by DescribeConfigs (source static)."""
        return {
            **self.static_configs,
            "broker.id": str(self.broker_id),
            "broker.rack": self.rack,
            "log.dirs": ",".join(str(d) for d in self.data_dirs),
            "replica.lag.time.max.ms": str(self.replica_lag_time_max_ms),
            "log.retention.check.interval.ms": str(self.retention_check_interval_ms),
            "log.cleaner.backoff.ms": str(self.log_cleaner_backoff_ms),
            "log.page.cache.window.bytes": str(self.page_cache_window_bytes),
        }


async def _every(interval: float, name: str, fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn`` every ``interval`` seconds; a failing pass is logged, the loop goes on."""
    while True:
        await asyncio.sleep(interval)
        try:
            await fn()
        except Exception:
            log.exception("%s pass failed", name)


async def _cleaner_pass(rm: ReplicaManager, bytes_per_s: float | None) -> None:
    """One compaction pass over every hosted compacted log (see module doc). A log that
    fails is logged and skipped; the others are still cleaned."""
    throttler = cleaner.Throttler(bytes_per_s)
    for p in list(rm.partitions.values()):
        lg = p.log
        if lg.closed or not lg.config.compact_enabled:
            continue
        try:
            res = await asyncio.to_thread(
                cleaner.clean_log, lg, now_ms(), throttler=throttler, max_offset=p.high_watermark
            )
        except (HeadwaterError, OSError):
            log.exception("cleaning %s failed", lg.dir.name)
            continue
        if res is not None:
            log.info(
                "cleaned %s: offsets [%d, %d) dirty, %d -> %d segments, %d records removed",
                lg.dir.name,
                res.plan.first_dirty,
                res.plan.end,
                res.segments_before,
                res.segments_after,
                res.records_removed,
            )


async def serve(settings: BrokerSettings) -> int:
    """Run the broker until SIGTERM/SIGINT (returns 0) or a fatal failure (returns 1)."""
    proc = ProcessRunner(f"broker {settings.broker_id}", ready_file=settings.ready_file)
    return await proc.run(functools.partial(_start, settings))


async def _start(settings: BrokerSettings, proc: ProcessRunner) -> dict[str, Any]:
    """Build the broker (module doc: start order), start its tasks; the ready payload."""
    for d in settings.data_dirs:
        d.mkdir(parents=True, exist_ok=True)
    before, limit = descriptors.raise_soft_limit()
    fileio.INDEX_FILES.bound = descriptors.index_files_bound(limit, settings.index_files_open_max)
    segment.PAGE_CACHE_WINDOW_BYTES = settings.page_cache_window_bytes
    log_manager = await asyncio.to_thread(LogManager, [str(d) for d in settings.data_dirs])
    budget = descriptors.DescriptorBudget(limit)
    room = budget.room()
    log.info(
        "open-file limit %d (was %d): %d descriptors open, %d kept for index files, room "
        "for %d more partitions",
        limit,
        before,
        descriptors.open_descriptors(),
        fileio.INDEX_FILES.bound,
        room,
    )
    if room == 0:
        log.error("no room for new partitions: %s", budget.refusal())
    metadata = MetadataCache()
    rm = ReplicaManager(
        settings.broker_id,
        log_manager,
        metadata,
        peers=Peers(metadata, settings.peer_overrides, _peer_credentials(settings.security)),
        replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
        descriptors=budget,
    )
    client: hetcd.Etcd | None = None
    registration: Registration | None = None

    async def close() -> None:
        await rm.shutdown()  # every log closed (clean-shutdown marker) ...
        if registration is not None:
            await registration.close()  # ... before the lease goes: the controller sees us leave
        if client is not None:
            await client.close()

    proc.closing("logs, registration, etcd", close)
    await asyncio.to_thread(rm.load_high_watermarks)
    producer_ids = ProducerIds()
    quotas = QuotaManager(settings.broker_id, static_window=static_window(settings.static_configs))

    auth = ServerAuth(settings.security)  # completed once etcd is connected (calls wait)
    bound: list[int] = []  # the port, once bound: the group streams' agents bootstrap here

    def self_address() -> str:
        me = rm.metadata.broker(settings.broker_id)
        if me is not None and me.port:
            return f"{me.host}:{me.port}"
        return f"{settings.advertised_host or settings.host}:{bound[0]}"

    running = await start_server(
        host=settings.host,
        port=settings.port,
        register=[
            servicer.registrar(rm, producer_ids, quotas),
            group_stream.registrar(
                metadata,
                self_address,
                settings.security.client_security(),
                settings.group_stream,
            ),
        ],
        service="broker",
        metrics_port=settings.metrics_port,
        security=settings.security,
        auth=auth,
        limits=settings.limits,
        serving=False,  # until the first UpdateMetadata (services.broker.metadata_cache)
    )
    bound.append(running.port)
    proc.serving(running, grace=STOP_GRACE_S)
    client = await hetcd.Etcd.connect(settings.etcd, **settings.security.etcd_kwargs())
    await attach_service(auth, client)  # token key, ACLs, the internal identity
    rm.read_controller_epoch = functools.partial(read_controller_epoch, client)
    producer_ids.allocator = ProducerIdAllocator(client)
    broker_config = BrokerConfig(
        client, settings.broker_id, settings.static_configs, rm.set_topic_defaults
    )
    await broker_config.load()  # topic defaults known before the first LeaderAndIsr
    # Logs of topics deleted (or re-created, or moved away) while this broker was not
    # registered go before it registers: never served, never replicated.
    await rm.remove_stray_logs(*await stray_replicas.cluster_assignment(client, settings.broker_id))

    def set_epoch(epoch: int | None) -> None:
        rm.broker_epoch = epoch

    registration = Registration(
        client,
        settings.broker_id,
        host=settings.advertised_host or settings.host,
        port=settings.advertised_port or running.port,
        rack=settings.rack,
        metrics_url=(
            f"http://{settings.advertised_host or settings.host}:{running.metrics_port}/metrics"
        ),
        on_epoch=set_epoch,
        ttl=settings.session_timeout_s,
        static_configs=settings.registered_configs(),
    )
    await registration.register()

    async def leave() -> None:
        # Nothing to move when every hosted partition has this broker as its only replica.
        if settings.controlled_shutdown_s > 0 and any(
            len(p.replicas) > 1 for p in rm.partitions.values()
        ):
            await controlled_shutdown(
                settings.broker_id,
                lambda: rm.broker_epoch,
                rm.peers,
                timeout_s=settings.controlled_shutdown_s,
            )

    # leaderships moved away while the server still answers; not after a failure
    proc.on_stop("controlled shutdown", leave, clean_only=True)
    _start_tasks(proc, settings, rm, registration, broker_config, quotas, client)
    proc.task("broker-health", _serve_once_metadata_arrives(running, metadata), finishes=True)
    # What lives for the whole process (modules, configs, loaded logs and indexes) leaves
    # the cyclic GC: a full collection no longer walks it. Without this, full collections
    # on the serving path paused the loop 15-90 ms (a 10 MB/s e2e run, shared 2-vCPU VM);
    # with it, under 1 ms (measured with bench/peers/headwater.py, issue 10).
    gc.collect()  # start-up garbage is freed, not frozen for good
    gc.freeze()
    log.info(
        "broker %d serving on %s:%d (epoch %s)",
        settings.broker_id,
        settings.host,
        running.port,
        rm.broker_epoch,
    )
    return {"port": running.port, "metrics_port": running.metrics_port}


async def _serve_once_metadata_arrives(running: RunningServer, metadata: MetadataCache) -> None:
    """Health turns SERVING when the controller's first UpdateMetadata has been applied:
    before it, this broker cannot answer Metadata (readiness, module doc)."""
    await metadata.received.wait()
    await running.set_serving(True)
    log.info("broker has the cluster's metadata: health SERVING")


def _start_tasks(
    proc: ProcessRunner,
    settings: BrokerSettings,
    rm: ReplicaManager,
    registration: Registration,
    broker_config: BrokerConfig,
    quotas: QuotaManager,
    client: hetcd.Etcd,
) -> None:
    """The broker's long-lived tasks (module doc), one line each."""
    # re-register under a new lease when the lease is lost
    proc.task("broker-registration", registration.run())
    # dynamic broker configs from etcd, applied without restart
    proc.task("broker-config", broker_config.run())
    # time and size retention: delete whole expired segments
    retention_s = settings.retention_check_interval_ms / 1000
    proc.task("broker-retention", _every(retention_s, "retention", rm.retention_pass))
    # log-shape gauges (services.broker.metrics; replication health is computed when scraped)
    metrics.health_when_scraped(rm.partitions.values)
    proc.task("broker-metrics", metrics.refresh_every(LOG_SHAPE_INTERVAL_S, rm.partitions.values))
    # flush.messages / flush.ms
    proc.task("broker-flush", _every(FLUSH_INTERVAL_S, "flush", rm.flush_pass))
    # log compaction of compacted topics
    cleaner_s = settings.log_cleaner_backoff_ms / 1000
    cleaner_bps = settings.log_cleaner_io_max_bytes_per_s
    proc.task(
        "broker-log-cleaner",
        _every(cleaner_s, "log-cleaner", lambda: _cleaner_pass(rm, cleaner_bps)),
    )
    # replication-offset-checkpoint of every log directory
    proc.task(
        "broker-hw-checkpoint",
        _every(HW_CHECKPOINT_INTERVAL_S, "hw-checkpoint", rm.checkpoint_high_watermarks),
    )
    # propose removing lagging followers from led ISRs
    proc.task("broker-isr-shrink", rm.isr.run_shrink())
    # ISR proposals -> AlterPartition to the controller
    proc.task("broker-alter-partition", rm.isr.run_sender())
    # quota configs from etcd, applied without restart
    proc.task("broker-quota-configs", quota_watcher.run(quotas, client))
    # quota rate gauges decay between records
    proc.task("broker-quota-metrics", quotas.run_metrics())


def _peer_credentials(security: ServerSecurity) -> grpc.ChannelCredentials | None:
    """TLS credentials towards other brokers and the controller (None: plaintext)."""
    client = security.client_security()
    return client.channel_credentials() if client is not None else None
