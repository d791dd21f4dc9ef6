"""The partitions this broker hosts, and the controller's commands that change them.

State owned here (all on the event loop):

* ``partitions``: ``(topic, partition) -> Partition`` for every replica the controller assigned
  to this broker since start (LeaderAndIsr adds or updates, StopReplica removes);
* ``controller_epoch``: the highest controller epoch seen; requests carrying an older one are
  refused with ``STALE_CONTROLLER_EPOCH`` (a deposed controller cannot change anything). A
  higher one is adopted only once etcd confirms it (``read_controller_epoch``: the epoch the
  controller election wrote, headwater/platform/cluster_layout.py): a request carrying an epoch etcd
  does not have is refused with ``STALE_CONTROLLER_EPOCH`` and changes nothing, so a forged
  epoch cannot lock the real controller out;
* ``broker_epoch``: this broker's registration epoch (the etcd create revision of its key), set
  by the registration task; control requests must carry exactly this value, else
  ``STALE_BROKER_EPOCH`` (they were meant for an earlier incarnation of this broker). Until the
  broker is registered every control request is refused that way.

Replication (issue 3): a LeaderAndIsr makes each partition leader (``Partition.become_leader``;
its follower fetching stops) or follower (``become_follower``; it stops taking produce and
consumer fetches with ``NOT_LEADER_OR_FOLLOWER`` and is handed to ``fetchers``, which truncate
it by leader epoch and then fetch); leader -1 means no leader (nothing fetched). ``isr``
proposes ISR changes for led partitions to the controller. A state for the current leader epoch
with an older partition epoch than known is ignored (an AlterPartition answer got here first).
High watermarks are loaded from each log directory's ``replication-offset-checkpoint`` when a
partition opens and written back by :meth:`checkpoint_high_watermarks`, which also keeps the
checkpointed high watermark of every log still on disk that this process has not opened (the
passes before the first LeaderAndIsr after a restart, and a LeaderAndIsr naming only some
partitions, must not reset the others to 0 for the next start).

Topic ids (issue 15): a hosted partition knows its topic's id (stored with its log,
``storage/partition_metadata.py``). A LeaderAndIsr or an UpdateMetadata naming the topic with
another id means the name was deleted and created again while this broker missed the
StopReplica: the old log is deleted (a LeaderAndIsr then starts an empty one), never served.

Control requests (LeaderAndIsr, UpdateMetadata, StopReplica) run one at a time under
``_control_lock``; they create, open, close and delete logs through the ``LogManager`` in
worker threads. A LeaderAndIsr applies its partitions concurrently (one task per partition,
a partition's own states in request order): a failover's hundreds of new leaderships each
write a leader-epoch checkpoint before leading (without fsync: ``storage/leader_epoch.py``),
and a start's thousands of new partitions each create a log, in the worker threads at once
instead of one after another. A LeaderAndIsr whose RPC is cancelled (the controller's
deadline) is still applied to the end; the resend finds its partitions done. New
partitions past what the open-file limit leaves room for are refused
(``KAFKA_STORAGE_ERROR``, ``descriptors.py``). A whole-request rejection (fencing) is
answered in the response's ``error_code``; partition-level failures in the per-partition
list.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from headwater.batch import now_ms
from headwater.config import TopicConfig, resolve_topic_config
from headwater.errors import (
    BrokerNotAvailableError,
    HeadwaterError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    StaleBrokerEpochError,
    StaleControllerEpochError,
    UnknownTopicOrPartitionError,
    message_of,
)
from headwater.platform.etcd import EtcdError
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.broker import metrics
from services.broker.codes import error_code
from services.broker.descriptors import DescriptorBudget
from services.broker.metadata_cache import MetadataCache
from services.broker.partition import LeaderState, Partition, Role, hw_changes
from services.broker.replication import isr as isr_mod
from services.broker.replication.fetcher import FetcherManager
from services.broker.replication.isr import IsrManager
from services.broker.replication.peers import Peers
from services.broker.storage import hw_checkpoint

log = logging.getLogger(__name__)

Key = tuple[str, int]


class ReplicaManager:
    """Hosted partitions, controller fencing and the control RPCs' effects."""

    def __init__(
        self,
        broker_id: int,
        log_manager: Any,
        metadata: MetadataCache,
        *,
        peers: Peers | None = None,
        replica_lag_time_max_ms: int = 10_000,
        descriptors: DescriptorBudget | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.metadata = metadata
        self.partitions: dict[Key, Partition] = {}
        self.controller_epoch = -1
        #: reads the controller epoch from etcd (set once etcd is connected; until then no
        #: higher epoch is adopted)
        self.read_controller_epoch: Callable[[], Awaitable[int]] | None = None
        #: the highest controller epoch etcd was seen to hold
        self._confirmed_controller_epoch = -1
        self.broker_epoch: int | None = None
        self._control_lock = asyncio.Lock()
        #: how many new partitions the open-file limit leaves room for
        self.descriptors = descriptors or DescriptorBudget()
        #: control requests still being applied after their RPC was cancelled
        self._control_tasks: set[asyncio.Task[Any]] = set()
        self.peers = peers or Peers(metadata)
        self.fetchers = FetcherManager(broker_id, self.peers, lambda: self.broker_epoch)
        self.isr = IsrManager(
            broker_id,
            partitions=lambda: [p for p in self.partitions.values() if p.is_leader],
            broker_epoch=lambda: self.broker_epoch,
            peers=self.peers,
            lag_ms=replica_lag_time_max_ms,
        )
        #: each log directory's high watermarks as last checkpointed by this process
        self._hw_written: dict[Any, dict[Key, int]] = {}
        #: ``(hw_changes(), _partitions_changes)`` as of the last checkpoint pass
        self._hw_seen: tuple[int, int] | None = None
        #: bumped when a partition is added to or removed from ``partitions``
        self._partitions_changes = 0
        #: checkpointed high watermarks of logs on disk not opened in this process (read at
        #: start, or kept when a partition is stopped without deleting its log): used when
        #: the partition opens, and written back by every checkpoint pass meanwhile.
        self._hw_at_start: dict[Key, int] = {}
        #: topic-key defaults for topics without an override (static flag < brokers/<default>
        #: < brokers/<id>), kept current by ``headwater.platform.dynamic_config``.
        self.topic_defaults: dict[str, str] = {}
        #: each hosted topic's overrides as last received from the controller.
        self._topic_overrides: dict[str, dict[str, str]] = {}

    def load_high_watermarks(self) -> None:
        """Read every log directory's HW checkpoint (blocking: call off the loop)."""
        for d in self.log_manager.log_dirs:
            hws = hw_checkpoint.read_high_watermarks(d)
            self._hw_at_start.update(hws)
            self._hw_written[d] = hws

    async def remove_stray_logs(self, expected: dict[Key, str], unreadable: set[str]) -> list[Key]:
        """Delete the logs the cluster no longer assigns here under their stored topic id
        (``services.broker.stray_replicas``; ``LogManager.remove_stale``), before the broker
        registers. Returns the partitions deleted."""
        removed: list[Key] = await asyncio.to_thread(
            self.log_manager.remove_stale, expected, unknown_topics=unreadable
        )
        for key in removed:
            self._hw_at_start.pop(key, None)
            self._partitions_changes += 1
            log.warning(
                "deleted stray log %s-%d: its topic was deleted or re-created, or the "
                "partition moved away, while this broker was not registered",
                *key,
            )
        return removed

    async def checkpoint_high_watermarks(self) -> None:
        """Write each log directory's ``replication-offset-checkpoint``: the high watermark
        of every hosted partition, and the checkpointed one of every log on disk not opened
        in this process (so a pass before the first LeaderAndIsr rewrites what it read, never
        an empty file). A directory whose high watermarks are all as last written or read
        here is skipped (an idle broker does not rewrite and fsync the same file every
        second); with no high watermark changed and no partition added or removed since the
        last pass, not even visited."""
        seen = (hw_changes(), self._partitions_changes)
        if seen == self._hw_seen:
            return
        by_dir: dict[Any, dict[Key, int]] = {d: {} for d in self.log_manager.log_dirs}
        for key, hw in self._hw_at_start.items():
            home = self.log_manager.log_dir_of(*key)
            if home is not None:  # an entry without a log on disk is dropped
                by_dir.setdefault(home, {})[key] = hw
        for key, p in self.partitions.items():
            home = self.log_manager.log_dir_of(*key)
            if home is not None:
                by_dir.setdefault(home, {})[key] = p.high_watermark
        for d, hws in by_dir.items():
            if self._hw_written.get(d) == hws:
                continue
            await asyncio.to_thread(hw_checkpoint.write_high_watermarks, d, hws)
            self._hw_written[d] = hws
        self._hw_seen = seen

    # ------------------------------------------------------------------ lookups (handlers)

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def leader_partition(self, topic: str, partition: int) -> Partition:
        """The partition if this broker leads it; raises UNKNOWN_TOPIC_OR_PARTITION when the
        cluster does not know it, NOT_LEADER_OR_FOLLOWER when another broker leads it,
        KAFKA_STORAGE_ERROR when a storage error took it offline here."""
        p = self.partitions.get((topic, partition))
        if p is not None and p.role is Role.OFFLINE and p.storage_error is not None:
            raise KafkaStorageError(f"{topic}-{partition} is offline: {p.storage_error}")
        if p is None or p.role is Role.OFFLINE:
            if self.metadata.has_partition(topic, partition):
                raise NotLeaderOrFollowerError(
                    f"broker {self.broker_id} does not lead {topic}-{partition}"
                )
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {topic}-{partition}")
        if not p.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {topic}-{partition} "
                f"(leader {p.leader_id})"
            )
        return p

    # ------------------------------------------------------------------ fencing

    async def check_fence(self, controller_epoch: int, broker_epoch: int) -> None:
        """Raise unless a control request for ``broker_epoch`` from ``controller_epoch`` may
        act here: BROKER_NOT_AVAILABLE (still registering), STALE_BROKER_EPOCH,
        STALE_CONTROLLER_EPOCH; adopts a newer controller epoch once etcd confirms it."""
        if self.broker_epoch is None or broker_epoch > self.broker_epoch:
            # The controller saw our registration in etcd before our own put returned (or
            # before a re-registration finished): not stale, just early. Retriable.
            raise BrokerNotAvailableError(
                f"broker is still registering (request for epoch {broker_epoch}, "
                f"known epoch {self.broker_epoch})"
            )
        if broker_epoch != self.broker_epoch:
            raise StaleBrokerEpochError(
                f"request for broker epoch {broker_epoch}, this broker's epoch is "
                f"{self.broker_epoch}"
            )
        if controller_epoch < self.controller_epoch:
            raise StaleControllerEpochError(
                f"controller epoch {controller_epoch} is older than {self.controller_epoch}"
            )
        if controller_epoch > self.controller_epoch:
            await self._confirm_controller_epoch(controller_epoch)
        self.controller_epoch = controller_epoch

    async def _confirm_controller_epoch(self, epoch: int) -> None:
        """Raise unless etcd holds a controller epoch >= ``epoch`` (read only when ``epoch``
        is above what etcd was last seen to hold)."""
        if epoch <= self._confirmed_controller_epoch:
            return
        if self.read_controller_epoch is None:
            raise BrokerNotAvailableError("broker is still starting (etcd not connected)")
        try:
            current = await self.read_controller_epoch()
        except (OSError, EtcdError) as exc:
            raise BrokerNotAvailableError(
                f"cannot confirm controller epoch {epoch}: etcd unreachable ({exc})"
            ) from None
        self._confirmed_controller_epoch = max(self._confirmed_controller_epoch, current)
        if epoch > current:
            raise StaleControllerEpochError(
                f"controller epoch {epoch} is not the cluster's: etcd holds {current}"
            )

    # ------------------------------------------------------------------ control RPCs

    async def update_metadata(
        self, req: broker_pb2.UpdateMetadataRequest
    ) -> broker_pb2.UpdateMetadataResponse:
        async with self._control_lock:
            try:
                await self.check_fence(req.controller_epoch, req.broker_epoch)
            except HeadwaterError as exc:
                log.warning("UpdateMetadata refused: %s", exc)
                return broker_pb2.UpdateMetadataResponse(error_code=error_code(exc))
            self.metadata.update(req)
            await self._drop_replaced_topics(req)
            await self._apply_topic_configs(req)
            return broker_pb2.UpdateMetadataResponse(error_code=ErrorCode.NONE)

    async def _drop_replaced_topics(self, req: broker_pb2.UpdateMetadataRequest) -> None:
        """Delete hosted partitions whose topic name now has another topic id: the topic was
        deleted and created again while this broker missed the StopReplica (it was not
        registered), and the new topic may not even be placed here. A topic absent from the
        snapshot is left alone (a record the controller could not read must not delete
        data); the start-up check handles it (``stray_replicas.py``)."""
        ids = {t.name: t.topic_id for t in req.topics if t.topic_id}
        dropped = False
        for p in list(self.partitions.values()):
            current = ids.get(p.topic)
            if current and p.topic_id and current != p.topic_id:
                log.warning(
                    "%s-%d: topic id %s replaced by %s; deleting the old log",
                    p.topic,
                    p.partition,
                    p.topic_id,
                    current,
                )
                await self._stop(p, delete=True)
                dropped = True
        if dropped:
            self._update_role_gauges()

    async def _apply_topic_configs(self, req: broker_pb2.UpdateMetadataRequest) -> None:
        """Dynamic topic configs: an altered config reaches brokers in UpdateMetadata (no
        LeaderAndIsr is sent for it), so hosted partitions take it from there."""
        for topic in req.topics:
            hosted = [p for (t, _), p in self.partitions.items() if t == topic.name]
            if not hosted:
                continue
            try:
                config = self._resolve(topic.name, topic.configs)
            except HeadwaterError as exc:  # the controller validates; never expected
                log.error(
                    "topic %s: ignoring invalid configs %s: %s", topic.name, topic.configs, exc
                )
                continue
            for p in hosted:
                if config != p.config:
                    log.info("%r: applying changed topic configs", p)
                    await p.run_exclusive(functools.partial(p.update_config, config))

    def _resolve(self, topic: str, overrides: Any) -> TopicConfig:
        """The topic's effective config: its ``overrides`` over :attr:`topic_defaults`."""
        config = resolve_topic_config(dict(overrides), self.topic_defaults)
        self._topic_overrides[topic] = dict(overrides)
        return config

    async def set_topic_defaults(self, defaults: dict[str, str]) -> None:
        """Dynamic broker config changed: re-resolve and apply every hosted partition's
        config (serialised with the control RPCs; takes effect without restart)."""
        async with self._control_lock:
            self.topic_defaults = dict(defaults)
            for (topic, _), p in list(self.partitions.items()):
                overrides = self._topic_overrides.get(topic, {})
                config = resolve_topic_config(overrides, self.topic_defaults)
                if config != p.config:
                    log.info("%r: applying changed broker topic defaults", p)
                    await p.run_exclusive(functools.partial(p.update_config, config))

    async def leader_and_isr(
        self, req: broker_pb2.LeaderAndIsrRequest
    ) -> broker_pb2.LeaderAndIsrResponse:
        """Apply a LeaderAndIsr. The work runs in its own task, shielded from the caller: when
        the controller's deadline cancels the RPC part-way (thousands of new partitions on a
        loaded broker), the application still completes under the control lock, and the
        controller's resend, queued behind it, finds every partition already in the state it
        names (a cheap no-op each) instead of starting the work again from the first one."""
        task = asyncio.get_running_loop().create_task(
            self._leader_and_isr(req), name="leader-and-isr"
        )
        self._control_tasks.add(task)
        task.add_done_callback(self._control_done)
        return await asyncio.shield(task)

    def _control_done(self, task: asyncio.Task[Any]) -> None:
        """A control task ended; its failure is logged (its RPC may no longer be there)."""
        self._control_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("LeaderAndIsr failed", exc_info=task.exception())

    async def _leader_and_isr(
        self, req: broker_pb2.LeaderAndIsrRequest
    ) -> broker_pb2.LeaderAndIsrResponse:
        async with self._control_lock:
            try:
                await self.check_fence(req.controller_epoch, req.broker_epoch)
            except HeadwaterError as exc:
                log.warning("LeaderAndIsr refused: %s", exc)
                return broker_pb2.LeaderAndIsrResponse(error_code=error_code(exc))
            resp = broker_pb2.LeaderAndIsrResponse(error_code=ErrorCode.NONE)
            by_key: dict[Key, list[int]] = {}
            for i, a in enumerate(req.partitions):
                by_key.setdefault((a.topic, a.state.partition), []).append(i)
            failures: list[Exception | None] = [None] * len(req.partitions)
            applied: list[str | None] = [None] * len(req.partitions)
            self._refuse_past_descriptors(by_key, failures)

            async def apply(indexes: list[int]) -> None:
                for i in indexes:  # one partition's states in request order
                    if failures[i] is not None:
                        continue  # refused before applying
                    a = req.partitions[i]
                    try:
                        applied[i] = await self._apply_assignment(a)
                    except Exception as exc:
                        if isinstance(exc, KafkaStorageError):
                            self._storage_failed((a.topic, a.state.partition), exc)
                        if not isinstance(exc, HeadwaterError):
                            log.exception(
                                "LeaderAndIsr for %s-%d failed", a.topic, a.state.partition
                            )
                        failures[i] = exc

            # Partitions are independent: applied concurrently, so their storage work (the
            # leader-epoch checkpoint's fsyncs of a new leadership, opening a log) overlaps
            # in the worker threads instead of costing one partition after another.
            await asyncio.gather(*(apply(indexes) for indexes in by_key.values()))
            # The new partitions' files, written without an fsync each: one write-back per
            # log directory. One that fails fails its new partitions as their fsyncs did
            # (offline, KAFKA_STORAGE_ERROR; the resend writes them back again).
            unsynced = await asyncio.to_thread(self.log_manager.sync_created)
            for key, os_error in unsynced.items():
                lost = KafkaStorageError(f"cannot write back {key[0]}-{key[1]}: {os_error}")
                self._storage_failed(key, lost)
                for i in by_key.get(key, ()):
                    if failures[i] is None:
                        failures[i] = lost
            states = [x for x in applied if x is not None]
            if states:
                # One line for the request: a failover's thousand partition states written
                # one log call each kept the event loop (and its GIL hand-offs) busy.
                log.info("LeaderAndIsr: %d partition states: %s", len(states), "; ".join(states))
            for a, failure in zip(req.partitions, failures, strict=True):
                if failure is None:
                    code, message = ErrorCode.NONE, ""
                else:
                    code, message = error_code(failure), message_of(failure)
                resp.partitions.append(
                    broker_pb2.PartitionError(
                        topic=a.topic,
                        partition=a.state.partition,
                        error_code=code,
                        error_message=message,
                    )
                )
            self._update_role_gauges()
            return resp

    def _storage_failed(self, key: Key, exc: KafkaStorageError) -> None:
        """A hosted partition's state could not be applied for an I/O error (a leader-epoch
        checkpoint that could not be written, say): it goes offline here, as Kafka does for a
        failed log directory, until a later LeaderAndIsr applies. It must not keep serving
        the role it was half-way into (a leadership the controller is about to move away):
        produce and fetch now answer KAFKA_STORAGE_ERROR (clients refresh their metadata) and
        it follows nobody. Its log stays open for that later LeaderAndIsr."""
        p = self.partitions.get(key)
        if p is None:
            return
        log.error("%r: offline after a storage error applying LeaderAndIsr: %s", p, exc)
        self.fetchers.remove(key)
        p.go_offline(message_of(exc))

    def _refuse_past_descriptors(
        self, by_key: dict[Key, list[int]], failures: list[Exception | None]
    ) -> None:
        """Refuse the new partitions (in request order) past what the open-file limit leaves
        room for (``descriptors.py``); hosted ones are always applied."""
        new = [key for key in by_key if key not in self.partitions]
        admitted = self.descriptors.admit(len(new))
        if admitted == len(new):
            return
        refused = new[admitted:]
        message = self.descriptors.refusal()
        log.error("LeaderAndIsr: refusing %d new partitions: %s", len(refused), message)
        metrics.PARTITIONS_REFUSED.labels("descriptors").inc(len(refused))
        for key in refused:
            for i in by_key[key]:
                failures[i] = KafkaStorageError(f"{key[0]}-{key[1]}: {message}")

    async def _apply_assignment(self, a: broker_pb2.PartitionAssignment) -> str | None:
        """Apply one partition's state; returns it for the request's log line (None: an
        older partition epoch, ignored)."""
        state = a.state
        key = (a.topic, state.partition)
        if self.broker_id not in state.replicas:
            raise UnknownTopicOrPartitionError(
                f"broker {self.broker_id} is not a replica of {a.topic}-{state.partition}"
            )
        config = self._resolve(a.topic, a.configs)
        p = self.partitions.get(key)
        if p is not None and a.topic_id and p.topic_id and a.topic_id != p.topic_id:
            # The topic was deleted and re-created while this broker missed the StopReplica.
            log.warning("%s-%d: topic id changed, deleting the old log", a.topic, state.partition)
            await self._stop(p, delete=True)
            p = None
        if p is not None:
            if state.leader_epoch < p.leader_epoch:
                raise StaleControllerEpochError(
                    f"{a.topic}-{state.partition}: leader epoch {state.leader_epoch} is older "
                    f"than the current {p.leader_epoch}"
                )
            if (
                state.leader_epoch == p.leader_epoch
                and state.partition_epoch < p.partition_epoch
                and p.role is not Role.OFFLINE
            ):
                log.info("%r: ignoring older partition epoch %d", p, state.partition_epoch)
                return None
            if config != p.config:
                await p.run_exclusive(lambda: p.update_config(config))  # type: ignore[union-attr]
        else:
            # A stored log of another topic id (a deleted topic of the same name) is deleted
            # and replaced by an empty one here: its records are never served or replicated.
            log_ = await asyncio.to_thread(
                self.log_manager.get_or_create, a.topic, state.partition, config, a.topic_id
            )
            p = Partition(a.topic, state.partition, log_, config, self.broker_id)
            p.topic_id = self.log_manager.topic_id(a.topic, state.partition) or ""
            p.high_watermark = min(self._hw_at_start.pop(key, 0), p.log_end_offset)
            self.partitions[key] = p
            self._partitions_changes += 1
            metrics.set_log_size(a.topic, state.partition, int(log_.size_in_bytes))
        p.topic_id = a.topic_id or p.topic_id
        s = LeaderState(
            state.leader,
            state.leader_epoch,
            state.partition_epoch,
            tuple(state.replicas),
            tuple(state.isr),
        )
        if state.leader == self.broker_id:
            self.fetchers.remove(key)
            await p.become_leader(s, isr_mod.now_ms())
        else:
            restart = await p.become_follower(s)
            if state.leader < 0:
                self.fetchers.remove(key)
            elif restart or self.fetchers.following(key) != state.leader:
                self.fetchers.add(p, state.leader, state.leader_epoch)
        return f"{p!r} (replicas {list(p.replicas)}, isr {list(p.isr)})"

    async def stop_replica(
        self, req: broker_pb2.StopReplicaRequest
    ) -> broker_pb2.StopReplicaResponse:
        async with self._control_lock:
            try:
                await self.check_fence(req.controller_epoch, req.broker_epoch)
            except HeadwaterError as exc:
                log.warning("StopReplica refused: %s", exc)
                return broker_pb2.StopReplicaResponse(error_code=error_code(exc))
            resp = broker_pb2.StopReplicaResponse(error_code=ErrorCode.NONE)
            for sp in req.partitions:
                try:
                    p = self.partitions.get((sp.topic, sp.partition))
                    if p is not None:
                        await self._stop(p, delete=sp.delete)
                    elif sp.delete:
                        # Not opened since start, but its data may still be on disk.
                        await asyncio.to_thread(self.log_manager.delete, sp.topic, sp.partition)
                        self._hw_at_start.pop((sp.topic, sp.partition), None)
                        self._partitions_changes += 1
                    code, message = ErrorCode.NONE, ""
                except Exception as exc:
                    log.exception("StopReplica for %s-%d failed", sp.topic, sp.partition)
                    code, message = error_code(exc), message_of(exc)
                resp.partitions.append(
                    broker_pb2.PartitionError(
                        topic=sp.topic,
                        partition=sp.partition,
                        error_code=code,
                        error_message=message,
                    )
                )
            self._update_role_gauges()
            return resp

    async def _stop(self, p: Partition, *, delete: bool) -> None:
        """Take ``p`` offline (waking its fetch streams), then close or delete its log."""
        self.partitions.pop((p.topic, p.partition), None)
        self._partitions_changes += 1
        self.fetchers.remove(p.key)
        p.go_offline()
        if delete:
            await p.run_exclusive(lambda: self.log_manager.delete(p.topic, p.partition))
        else:
            await p.run_exclusive(p.log.close)
            # its log stays on disk: its high watermark stays checkpointed
            self._hw_at_start[p.key] = p.high_watermark
        metrics.forget_partition(p.topic, p.partition)
        log.info("stopped %s-%d (delete=%s)", p.topic, p.partition, delete)

    def _update_role_gauges(self) -> None:
        leaders = sum(1 for p in self.partitions.values() if p.is_leader)
        metrics.PARTITIONS.labels("leader").set(leaders)
        metrics.PARTITIONS.labels("follower").set(len(self.partitions) - leaders)

    # ------------------------------------------------------------------ maintenance

    async def retention_pass(self) -> None:
        """Delete expired segments (time and size retention) of every hosted log."""
        await self._maintenance(lambda: self.log_manager.retention_pass(now_ms()))
        metrics.refresh_log_shapes(list(self.partitions.values()))  # those that changed

    async def flush_pass(self) -> None:
        """fsync logs whose flush.messages / flush.ms policy is due."""
        await self._maintenance(lambda: self.log_manager.flush_pass(now_ms()))

    async def _maintenance(self, fn: Any) -> None:
        # LogManager and Log serialise these with appends internally (storage contract).
        await asyncio.to_thread(fn)

    async def shutdown(self) -> None:
        """Take every partition offline, then close every log (clean-shutdown marker) and
        release the log directories."""
        async with self._control_lock:
            await self.fetchers.close()
            try:
                await self.checkpoint_high_watermarks()
            except Exception:
                log.exception("high watermark checkpoint at shutdown failed")
            parts = list(self.partitions.values())
            self.partitions.clear()
            self._partitions_changes += 1
            for p in parts:
                p.go_offline()
            for p in parts:
                await p.run_exclusive(lambda: None)  # wait for an in-flight append
            await asyncio.to_thread(self.log_manager.close)
            await self.peers.close()
