"""The controller's single event loop: the only owner of the in-memory cluster state.

Everything that changes cluster metadata is an event on one ``asyncio.Queue`` consumed by one
task (:meth:`ControllerLoop.run`), one event at a time (Kafka's controller event manager):

* ``BecameActive(epoch)`` / ``Resigned`` — from the election;
* ``BrokerPut`` / ``BrokerGone`` — from the watch on
  ``/headwater/brokers/ids/`` (a task started while active);
* ``BrokerDied`` — a broker link's liveness watch found the process dead (its stream reset and
  its port refuses connections, :mod:`services.controller.broker_channels`): its registration
  is ended as its lease expiring would (``state.expire_broker``, fenced by this controller's
  epoch and the broker epoch) and it is handled as gone at once, well before the lease TTL.
  Hangs (a stopped process, a network partition) reset nothing and stay the lease's to detect;
* ``ReplicaOutcomes`` — a broker answered a LeaderAndIsr: the partitions it refused with
  ``KAFKA_STORAGE_ERROR`` (e.g. past its open-file budget) become offline replicas
  (:mod:`services.controller.offline_replicas`; Kafka's KIP-112): leadership moves to another
  live ISR member, or to -1 with none, and they leave the ISR, through the same fenced,
  conditioned etcd writes as every election; partitions it applied clear their marks (and
  are elected again: an offline partition gets its leader back);
* ``CoordinatorsChanged`` — the live group coordinators (``coordinators.watch``, a task
  started while active), copied into every UpdateMetadata;
* ``Command`` — an RPC handler's work (``services.controller.topics``) with a future the
  handler awaits; while standby, commands fail with NOT_CONTROLLER;
* ``Resync`` — reload everything from etcd and push it (after an error or a broken watch);
* ``RebalanceCheck`` — the periodic automatic preferred-leader election (``operations``);
* ``TopicDefaultsChanged`` — the cluster-wide dynamic config ``brokers/<default>`` changed
  (``cluster-config-watch``, a task started while active, the broker's
  :class:`~headwater.platform.dynamic_config.BrokerConfig` without a broker id).

The state (:mod:`services.controller.cluster_state`) is loaded from etcd on activation and
on ``Resync``, and changed only through its ``apply`` with typed change records, each applied
after the etcd write it describes has succeeded (or as the broker watch reports it).

Partition leadership (:mod:`services.controller.partition_leadership`, decisions in
:mod:`services.controller.leadership`): a broker's loss or return elects again the partitions
it holds. When the cluster-wide topic defaults change, or a topic override does
(``topics.alter_topic_configs``), offline partitions are elected again at once (e.g. unclean
election enabled). A broker that re-registers with a new epoch (a bounce faster than its
lease) is handled as gone, then joined. Brokers in controlled shutdown (``shutting_down``,
until they re-register or vanish) are never elected. Brokers are told through
:mod:`services.controller.requests`: one batched LeaderAndIsr per broker for the changed
partitions, and an UpdateMetadata snapshot to every broker.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from headwater import config as hconfig
from headwater import errors
from headwater.platform import cluster_layout
from headwater.platform import etcd as hetcd
from headwater.platform.dynamic_config import BrokerConfig
from headwater.v1 import metadata_pb2
from services.controller import cluster_state as cs
from services.controller import coordinators, metrics, operations, reassignment
from services.controller import state as st
from services.controller.broker_channels import BrokerChannels, Liveness
from services.controller.offline_replicas import OfflineReplicas
from services.controller.partition_leadership import PartitionLeadership

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class BecameActive:
    epoch: int


@dataclass(frozen=True)
class Resigned:
    pass


@dataclass(frozen=True)
class BrokerPut:
    broker: st.Broker


@dataclass(frozen=True)
class BrokerGone:
    broker_id: int


@dataclass(frozen=True)
class BrokerDied:
    broker: st.Broker


@dataclass(frozen=True)
class ReplicaOutcomes:
    broker: st.Broker
    #: refused with KAFKA_STORAGE_ERROR: key -> the topic id the request named
    refused: dict[tuple[str, int], str]
    #: applied without error
    applied: list[tuple[str, int]]


@dataclass(frozen=True)
class CoordinatorsChanged:
    coordinators: tuple[metadata_pb2.BrokerInfo, ...]


@dataclass(frozen=True)
class Resync:
    pass


@dataclass(frozen=True)
class RebalanceCheck:
    pass


@dataclass(frozen=True)
class TopicDefaultsChanged:
    defaults: dict[str, str]


@dataclass
class Command:
    """Work submitted by an RPC handler: ``fn(loop)`` runs on the event-loop task."""

    fn: Callable[[ControllerLoop], Awaitable[Any]]
    future: asyncio.Future[Any]


Event = (
    BecameActive
    | Resigned
    | BrokerPut
    | BrokerGone
    | BrokerDied
    | ReplicaOutcomes
    | CoordinatorsChanged
    | Resync
    | RebalanceCheck
    | TopicDefaultsChanged
    | Command
)


class ControllerLoop(PartitionLeadership):
    def __init__(
        self,
        etcd: hetcd.Etcd,
        *,
        controller_id: int,
        host: str,
        port: int,
        auto_leader_rebalance: bool = True,
        crash_detection: bool = True,
        imbalance_check_interval_s: float = 300.0,
        imbalance_percent: float = 10.0,
    ) -> None:
        self.etcd = etcd
        self.controller_id = controller_id
        self.host = host
        self.port = port
        self.channels = BrokerChannels()
        self.channels.on_leader_and_isr = self._leader_and_isr_answered
        #: replicas live brokers refused to host (cleared per broker on (re)registration)
        self.offline = OfflineReplicas()
        #: broker id -> its ReplicaOutcomes with refusals posted but not yet handled: until
        #: they are, every answer of that broker is posted too, so that a later success
        #: clears the mark the earlier refusal makes (the queue keeps their order)
        self._refusals_queued: Counter[int] = Counter()
        self.state: cs.ClusterState | None = None
        self.epoch: int | None = None
        #: Live brokers in controlled shutdown (never elected; cleared on (re)registration).
        self.shutting_down: set[int] = set()
        self.auto_leader_rebalance = auto_leader_rebalance
        #: watch each broker's liveness stream (BrokerDied); off: the lease alone
        self.crash_detection = crash_detection
        self.imbalance_check_interval_s = imbalance_check_interval_s
        self.imbalance_percent = imbalance_percent
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._watcher: asyncio.Task[None] | None = None
        self._rebalancer: asyncio.Task[None] | None = None
        self._coord_watcher: asyncio.Task[None] | None = None
        self._config_watcher: asyncio.Task[None] | None = None
        #: The cluster-wide dynamic config (``brokers/<default>``; no static level: a
        #: broker's start-up flags are its own, not the cluster's).
        self.cluster_config = BrokerConfig(etcd, None, {}, self._topic_defaults_changed)
        #: Its topic keys: the defaults of every topic setting without an override.
        self.topic_defaults: dict[str, str] = {}
        #: Live group coordinators (from ``coordinators.watch``), pushed in UpdateMetadata.
        self.coordinators: tuple[metadata_pb2.BrokerInfo, ...] = ()
        self._stopping = False

    # ---- entry points (called on the loop by other tasks)

    def post(self, event: Event) -> None:
        self._queue.put_nowait(event)

    async def submit(self, fn: Callable[[ControllerLoop], Awaitable[T]]) -> T:
        """Run ``fn`` on the event-loop task and return its result (or raise its error)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.post(Command(fn, future))
        return await future

    def _leader_and_isr_answered(
        self, broker: st.Broker, refused: dict[tuple[str, int], str], applied: list[tuple[str, int]]
    ) -> None:
        """A link's report of an answered LeaderAndIsr: an event only when it can matter (a
        refusal, or an answer of a broker with marks, made or still queued to be made)."""
        bid = broker.broker_id
        if refused:
            self._refusals_queued[bid] += 1
        elif not (self.offline.has(bid) or self._refusals_queued[bid]):
            return
        self.post(ReplicaOutcomes(broker, refused, applied))

    @property
    def active(self) -> bool:
        return self.epoch is not None

    async def run(self) -> None:
        """Consume events forever (the one task that owns ``state``)."""
        while True:
            event = await self._queue.get()
            metrics.EVENTS.labels(type(event).__name__).inc()
            if isinstance(event, Command):
                await self._run_command(event)
                metrics.refresh(
                    self.state.partitions if self.state is not None else None, len(self.offline)
                )
                continue
            try:
                await self._handle(event)
            except (hetcd.EtcdError, st.FencedError) as exc:
                log.warning("%s failed (%s); resyncing shortly", type(event).__name__, exc)
                self._schedule_resync()
            except Exception:
                log.exception("controller event %s failed", type(event).__name__)
                self._schedule_resync()
            finally:
                metrics.refresh(
                    self.state.partitions if self.state is not None else None, len(self.offline)
                )

    async def _run_command(self, cmd: Command) -> None:
        if cmd.future.done():  # the caller went away
            return
        try:
            if not self.active:
                raise errors.NotControllerError(
                    f"controller {self.controller_id} is not the active controller"
                )
            result = await cmd.fn(self)
        except st.FencedError as exc:
            self._schedule_resync()
            if not cmd.future.done():
                cmd.future.set_exception(errors.NotControllerError(str(exc)))
        except hetcd.EtcdError as exc:
            if not cmd.future.done():
                cmd.future.set_exception(errors.RequestTimedOutError(f"etcd: {exc}"))
        except BaseException as exc:
            if not cmd.future.done():
                cmd.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            if not cmd.future.done():
                cmd.future.set_result(result)

    def _schedule_resync(self) -> None:
        if self.active and not self._stopping:
            asyncio.get_running_loop().call_later(1.0, self.post, Resync())

    async def _handle(self, event: Event) -> None:
        if isinstance(event, ReplicaOutcomes) and event.refused:
            self._refusals_queued[event.broker.broker_id] -= 1
            if self._refusals_queued[event.broker.broker_id] <= 0:
                del self._refusals_queued[event.broker.broker_id]
        if isinstance(event, BecameActive):
            await self._become_active(event.epoch)
        elif isinstance(event, Resigned):
            await self._resign()
        elif not self.active:
            return  # broker events racing with resignation
        elif isinstance(event, BrokerPut):
            await self._broker_put(event.broker)
        elif isinstance(event, BrokerGone):
            await self._broker_gone(event.broker_id)
        elif isinstance(event, BrokerDied):
            await self._broker_died(event.broker)
        elif isinstance(event, ReplicaOutcomes):
            await self._replica_outcomes(event)
        elif isinstance(event, CoordinatorsChanged):
            self.coordinators = event.coordinators
            self.send_update_metadata()
        elif isinstance(event, Resync):
            await self._load_and_watch()
        elif isinstance(event, RebalanceCheck):
            await operations.rebalance_leaders(self)
        elif isinstance(event, TopicDefaultsChanged) and event.defaults != self.topic_defaults:
            log.info("cluster-wide topic defaults: %s", event.defaults)
            self.topic_defaults = event.defaults
            await self.reelect(self.all_keys())

    # ---- activation

    async def _become_active(self, epoch: int) -> None:
        self.epoch = epoch
        self.shutting_down = set()
        self.offline = OfflineReplicas()
        if self.crash_detection:
            self.channels.liveness = Liveness(
                self.controller_id, epoch, lambda b: self.post(BrokerDied(b))
            )
        metrics.ACTIVE.set(1)
        metrics.EPOCH.set(epoch)
        await self._load_and_watch()
        if self.auto_leader_rebalance and self._rebalancer is None:
            self._rebalancer = asyncio.create_task(self._tick_rebalance(), name="rebalance-timer")
            self._rebalancer.add_done_callback(_log_task_end)

    async def _tick_rebalance(self) -> None:
        """Post a RebalanceCheck every ``imbalance_check_interval_s`` while active."""
        while True:
            await asyncio.sleep(self.imbalance_check_interval_s)
            self.post(RebalanceCheck())

    async def _load_and_watch(self) -> None:
        """(Re)load state from etcd, push it to brokers, and make sure the broker watch runs
        (it is started after the first successful load, or again if it ended)."""
        assert self.epoch is not None
        revision = await self._load_and_push(self.epoch)
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch_brokers(revision), name="broker-watch")
            self._watcher.add_done_callback(_log_task_end)
        if self._coord_watcher is None or self._coord_watcher.done():
            self._coord_watcher = asyncio.create_task(
                coordinators.watch(self.etcd, lambda c: self.post(CoordinatorsChanged(c))),
                name="coordinator-watch",
            )
            self._coord_watcher.add_done_callback(_log_task_end)
        if self._config_watcher is None or self._config_watcher.done():
            self._config_watcher = asyncio.create_task(
                self.cluster_config.run(), name="cluster-config-watch"
            )
            self._config_watcher.add_done_callback(_log_task_end)

    async def _topic_defaults_changed(self, defaults: dict[str, str]) -> None:
        self.post(TopicDefaultsChanged(dict(defaults)))

    async def _load_and_push(self, epoch: int) -> int:
        state, revision = await cs.load(self.etcd)
        await self.cluster_config.load()  # the defaults the elections below resolve with
        self.topic_defaults = hconfig.topic_defaults_of(self.cluster_config.current)
        if not state.cluster_id:
            candidate = uuid.uuid4().hex
            result = await self.etcd.txn(
                [hetcd.cmp_absent(cluster_layout.CLUSTER_ID_KEY)],
                [hetcd.op_put(cluster_layout.CLUSTER_ID_KEY, candidate)],
                [hetcd.op_get(cluster_layout.CLUSTER_ID_KEY)],
            )
            kvs = result.responses[0] if not result.succeeded else None
            state.apply(
                cs.ClusterIdSet(
                    candidate if result.succeeded else kvs[0].value.decode()  # type: ignore[index]
                )
            )
        self.state = state
        metrics.LIVE_BROKERS.set(len(state.brokers))
        keys = self.all_keys()
        changed = await self.write(self.reconcile(keys))
        await self.channels.sync(state.brokers)
        for bid in state.brokers:
            self.send_leader_and_isr(self.keys_on(bid), only=bid)
        self.send_update_metadata()
        await reassignment.complete_ready(self, keys)
        log.info(
            "active (epoch %d): %d brokers, %d topics, %d partitions (%d re-elected)",
            epoch,
            len(state.brokers),
            len(state.topics),
            len(keys),
            len(changed),
        )
        return revision

    async def _resign(self) -> None:
        self.epoch = None
        self.state = None
        self.offline = OfflineReplicas()
        metrics.ACTIVE.set(0)
        metrics.EPOCH.set(0)
        for task in (self._watcher, self._rebalancer, self._coord_watcher, self._config_watcher):
            if task is not None:
                task.cancel()
        self._watcher = self._rebalancer = self._coord_watcher = self._config_watcher = None
        self.coordinators = ()
        self.channels.liveness = None
        await self.channels.close()

    async def _watch_brokers(self, revision: int) -> None:
        """Feed broker registrations into the queue (runs while active)."""
        while True:
            try:
                watch = await self.etcd.watch_prefix(
                    cluster_layout.BROKERS_PREFIX, start_revision=revision + 1
                )
                try:
                    async for ev in watch:
                        revision = ev.mod_revision
                        bid = ev.key[len(cluster_layout.BROKERS_PREFIX) :]
                        if not bid.isdigit():
                            continue
                        if ev.kind == "put":
                            b = st.decode_broker(ev.key, ev.value, ev.create_revision)
                            if b is not None:
                                self.post(BrokerPut(b))
                        else:
                            self.post(BrokerGone(int(bid)))
                finally:
                    await watch.cancel()
            except hetcd.EtcdError as exc:
                log.warning("broker watch ended (%s); re-reading brokers", exc)
            await asyncio.sleep(0.5)
            try:
                snap = await self.etcd.get_prefix(cluster_layout.BROKERS_PREFIX)
            except hetcd.EtcdError as exc:
                log.warning("cannot re-read brokers: %s", exc)
                continue
            # events may have been missed: reload everything, then continue from here
            self.post(Resync())
            revision = snap.revision

    # ---- broker membership

    async def _broker_put(self, broker: st.Broker) -> None:
        assert self.state is not None
        known = self.state.brokers.get(broker.broker_id)
        if known == broker:
            return
        if known is not None and known.epoch != broker.epoch:
            # bounced within its lease: its replicas' state is gone; fail it over first
            await self._broker_gone(broker.broker_id)
        log.info("broker %d registered (epoch %d)", broker.broker_id, broker.epoch)
        self.shutting_down.discard(broker.broker_id)
        self.offline.forget(broker.broker_id)
        self.state.apply(cs.BrokerRegistered(broker))
        metrics.LIVE_BROKERS.set(len(self.state.brokers))
        await self.channels.sync(self.state.brokers)
        mine = self.keys_on(broker.broker_id)
        changed = await self.write(self.reconcile(mine))
        self.send_leader_and_isr(mine, only=broker.broker_id)
        self.send_leader_and_isr(changed, exclude=broker.broker_id)
        self.send_update_metadata()
        await reassignment.complete_ready(self, mine)

    async def _broker_gone(self, broker_id: int) -> None:
        assert self.state is not None
        self.shutting_down.discard(broker_id)
        self.offline.forget(broker_id)
        if broker_id not in self.state.brokers:
            return
        self.state.apply(cs.BrokerUnregistered(broker_id))
        log.info("broker %d gone", broker_id)
        metrics.LIVE_BROKERS.set(len(self.state.brokers))
        await self.channels.sync(self.state.brokers)
        mine = self.keys_on(broker_id)
        led = {k for k in mine if (s := self.state.partitions.get(k)) and s.leader == broker_id}
        changed = await self.write(self.reconcile(mine))
        # What stops acknowledgements first, each broker's queue in this order: the new
        # leaderships (leaders and their followers), the metadata clients find them in, the
        # shrunk ISRs where the receiver leads (acks=all waits on the ISR), then the rest.
        moved = [k for k in changed if k in led]
        rest = [k for k in changed if k not in led]
        self.send_leader_and_isr(moved)
        self.send_update_metadata()
        self.send_leader_and_isr(rest, leading=True)
        self.send_leader_and_isr(rest, leading=False)

    async def _replica_outcomes(self, event: ReplicaOutcomes) -> None:
        """A broker's LeaderAndIsr answer: refused replicas go offline, applied ones come back
        (module doc); the partitions whose leader or ISR that changes are written and told."""
        assert self.state is not None
        b = event.broker
        if self.state.brokers.get(b.broker_id) != b:
            return  # an answer of a registration that has since ended
        refused = {
            key: topic_id
            for key, topic_id in event.refused.items()
            if (t := self.state.topics.get(key[0])) is not None
            and t.topic_id == topic_id
            and b.broker_id in t.assignment.get(key[1], ())
        }
        gone = self.offline.mark(b.broker_id, b.epoch, refused)
        back = self.offline.clear(b.broker_id, b.epoch, event.applied)
        if gone:
            log.warning(
                "broker %d refused %d replicas (KAFKA_STORAGE_ERROR; first %s-%d): offline "
                "there, moving their leadership and taking them out of the ISR",
                b.broker_id,
                len(gone),
                *gone[0],
            )
        if back:
            log.info("broker %d hosts %d replicas it had refused", b.broker_id, len(back))
        # Every refused key, not only the newly marked ones: a mark whose reconcile was not
        # written (an etcd error) is reconciled at the next refusal; ``elect`` changes
        # nothing where nothing must change, so a repeated refusal writes and sends nothing.
        changed = await self.write(self.reconcile([*refused, *back]))
        if not changed:
            return
        # The refusing broker is told too: a replica it hosts (a leadership whose epoch it
        # could not write) must learn it no longer leads, not keep taking produce from
        # clients with old metadata. Its refusal of this request marks nothing new: no loop.
        self.send_leader_and_isr(changed)
        self.send_update_metadata()

    async def _broker_died(self, broker: st.Broker) -> None:
        """``broker``'s process is dead (module doc): end its registration, fail it over."""
        assert self.state is not None and self.epoch is not None
        if self.state.brokers.get(broker.broker_id) != broker:
            return  # already gone, or re-registered since the report
        if not await st.expire_broker(self.etcd, self.epoch, broker):
            log.info(
                "broker %d (epoch %d) changed before it was expired", broker.broker_id, broker.epoch
            )
            return  # the broker watch reports what happened instead
        log.warning("broker %d (epoch %d) died (connection reset)", broker.broker_id, broker.epoch)
        metrics.BROKER_RESETS.inc()
        await self._broker_gone(broker.broker_id)

    async def close(self) -> None:
        self._stopping = True
        await self._resign()


def _log_task_end(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("task %s failed", task.get_name(), exc_info=exc)
    else:
        log.error("task %s exited unexpectedly", task.get_name())
