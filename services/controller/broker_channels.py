"""Controller -> broker RPCs: one gRPC channel and one sender task per live broker.

The event loop builds complete requests (controller epoch, the target's broker epoch) and
hands them to :meth:`BrokerChannels.send`; it never waits for brokers. Each
:class:`BrokerLink` owns a queue and one named sender task that delivers requests in order,
retrying transport failures with capped exponential backoff for as long as the broker is
alive (the link is closed when the broker's registration disappears or changes epoch).

Deadlines (:func:`rpc_timeout_s`) grow with the request: 15 s for one partition, plus 25 ms
per further partition of a LeaderAndIsr or StopReplica (and 1 ms per partition of an
UpdateMetadata snapshot), capped at 10 minutes.

Coalescing: UpdateMetadata is a full snapshot, so a queued, not yet sent UpdateMetadata is
replaced by a newer one. With ``credentials`` (the controller's TLS identity) links are TLS.
Responses carrying STALE_CONTROLLER_EPOCH (this controller was
deposed) or STALE_BROKER_EPOCH (the broker re-registered; a new link follows) drop the request.

LeaderAndIsr answers: each answered LeaderAndIsr is reported to ``on_leader_and_isr`` (set by
the controller) with the partitions the broker refused with ``KAFKA_STORAGE_ERROR`` (key ->
topic id) and those it applied; the controller takes refused replicas offline
(:mod:`services.controller.offline_replicas`).

Crash detection (:class:`Liveness`, set while this controller is active): each link also holds
a ControllerLiveness stream open to its broker. When that stream breaks or ends, the link
probes the broker's address with a plain TCP connect: **refused** means no process listens
there any more (the broker died: its kernel reset the connections and closed the port), and
``on_death`` reports the registration; a connect that succeeds or times out (a slow, stopped or
partitioned broker, or a stream cut between two live ends) is not a death, and the stream is
opened again with capped backoff. Hangs are thus left to the etcd lease, and a reset is never
inferred from slowness. The stream's first response is fenced like a control request: stale
controller or broker epoch ends the watch (a new link, or a new controller, follows).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from headwater import errors, timeouts
from headwater.client.auth import channel_interceptors
from headwater.client.grpc_options import channel_options
from headwater.v1 import broker_pb2, broker_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from services.controller.state import Broker

log = logging.getLogger(__name__)

#: The deadline of a control request naming one partition (or none).
RPC_TIMEOUT_S = 15.0
#: What each further partition of a LeaderAndIsr or StopReplica adds to its deadline: a new
#: partition creates a log (files and fsyncs in the broker's worker threads), a deleted one
#: removes it. Measured on a loaded 2-core machine: about 45-50 ms per log when a broker
#: created 1,000 at load 25-32 (docs/benchmarks.md, "Many partitions"), two at a time.
PER_PARTITION_S = 0.025
#: What each partition of an UpdateMetadata snapshot adds (decoding and caching its state).
PER_METADATA_PARTITION_S = 0.001
#: No control request waits longer than this for its answer before it is sent again.
MAX_RPC_TIMEOUT_S = 600.0
MAX_BACKOFF_S = 2.0
#: How long the probe of a broker whose liveness stream broke waits for its TCP connect.
PROBE_TIMEOUT_S = 1.0

ControlRequest = (
    broker_pb2.LeaderAndIsrRequest
    | broker_pb2.UpdateMetadataRequest
    | broker_pb2.StopReplicaRequest
)


PartitionKey = tuple[str, int]
#: ``(broker, refused: key -> topic id, applied keys)`` of one answered LeaderAndIsr
OutcomeCallback = Callable[[Broker, dict[PartitionKey, str], list[PartitionKey]], None]
#: per-partition errors logged one by one per answer (the rest are counted)
LOGGED_PARTITION_ERRORS = 10


@dataclass(frozen=True)
class Liveness:
    """Who watches (the active controller's id and epoch) and whom to tell of a death."""

    controller_id: int
    controller_epoch: int
    #: called on the loop with the registration whose process was found dead
    on_death: Callable[[Broker], None]


async def connection_refused(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connect to ``host:port`` is refused (nothing listens there). A connect
    that succeeds, times out or fails otherwise (unreachable network) is not a refusal."""
    try:
        _, writer = await timeouts.wait_for(asyncio.open_connection(host, port), timeout_s)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False


def _code_name(code: int) -> str:
    """An error code's name (its number when this build does not know it)."""
    try:
        return ErrorCode.Name(code)
    except ValueError:
        return str(code)


def rpc_timeout_s(request: ControlRequest) -> float:
    """The deadline of a control request, scaled by its size (issue 17 item 4): a
    4,000-partition LeaderAndIsr gets 115 s where a one-partition one gets 15 s, so a broker
    creating thousands of logs is not sent the same request again while it is still applying
    it. Capped at :data:`MAX_RPC_TIMEOUT_S`."""
    if isinstance(request, broker_pb2.UpdateMetadataRequest):
        n = sum(len(t.partitions) for t in request.topics)
        extra = n * PER_METADATA_PARTITION_S
    else:
        extra = max(0, len(request.partitions) - 1) * PER_PARTITION_S
    return min(RPC_TIMEOUT_S + extra, MAX_RPC_TIMEOUT_S)


class BrokerLink:
    """The channel, queue and sender task for one broker registration (id + epoch), and its
    liveness watch while a :class:`Liveness` is given."""

    def __init__(
        self,
        broker: Broker,
        credentials: grpc.ChannelCredentials | None = None,
        liveness: Liveness | None = None,
        on_leader_and_isr: OutcomeCallback | None = None,
    ) -> None:
        self.broker = broker
        self._on_leader_and_isr = on_leader_and_isr
        target = f"{broker.host}:{broker.port}"
        bearer = channel_interceptors(target)  # the internal identity's token, if any
        if credentials is not None:
            self._channel = grpc.aio.secure_channel(
                target, credentials, options=channel_options(), interceptors=bearer
            )
        else:
            self._channel = grpc.aio.insecure_channel(
                target, options=channel_options(), interceptors=bearer
            )
        self._stub = broker_pb2_grpc.BrokerStub(self._channel)
        self._queue: collections.deque[ControlRequest] = collections.deque()
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(
            self._sender(), name=f"controller-link-{broker.broker_id}-{broker.epoch}"
        )
        self._task.add_done_callback(self._done)
        self._watch: asyncio.Task[None] | None = None
        if liveness is not None:
            self._watch = asyncio.create_task(
                self._watch_liveness(liveness),
                name=f"controller-liveness-{broker.broker_id}-{broker.epoch}",
            )
            self._watch.add_done_callback(self._done)
        #: Requests delivered (acknowledged by the broker), for tests and metrics.
        self.delivered = 0

    def _done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("sender to broker %d died", self.broker.broker_id, exc_info=task.exception())

    def send(self, request: ControlRequest) -> None:
        if isinstance(request, broker_pb2.UpdateMetadataRequest):
            self._queue = collections.deque(
                r for r in self._queue if not isinstance(r, broker_pb2.UpdateMetadataRequest)
            )
        self._queue.append(request)
        self._wakeup.set()

    def idle(self) -> bool:
        return not self._queue

    async def _sender(self) -> None:
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            request = self._queue[0]
            await self._deliver(request)
            if self._queue and self._queue[0] is request:
                self._queue.popleft()

    async def _deliver(self, request: ControlRequest) -> None:
        backoff = 0.05
        bid = self.broker.broker_id
        while True:
            try:
                response = await self._call(request)
            except grpc.RpcError as rpc_err:
                exc = errors.from_rpc_error(rpc_err)
                if isinstance(exc, errors.StaleControllerEpochError | errors.StaleBrokerEpochError):
                    log.warning("broker %d refused %s: %s", bid, type(request).__name__, exc)
                    return
                if not exc.retriable and not isinstance(exc, errors.UnknownServerError):
                    log.error("broker %d failed %s: %s", bid, type(request).__name__, exc)
                    return
                log.info("broker %d unreachable (%s); retry in %.2fs", bid, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            code = getattr(response, "error_code", 0)
            if code and errors.error_class(code).retriable:
                # e.g. BROKER_NOT_AVAILABLE: the broker has not finished registering yet
                log.info(
                    "broker %d answered %s with retriable %s; retry in %.2fs",
                    bid,
                    type(request).__name__,
                    code,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            self.delivered += 1
            if code:
                log.warning("broker %d answered %s with %s", bid, type(request).__name__, code)
            self._partition_errors(request, response)
            return

    def _partition_errors(self, request: ControlRequest, response: Any) -> None:
        """Log an answer's partition errors; report a LeaderAndIsr's outcome (module doc)."""
        bid = self.broker.broker_id
        errs = [perr for perr in getattr(response, "partitions", ()) if perr.error_code]
        for perr in errs[:LOGGED_PARTITION_ERRORS]:
            log.warning(
                "broker %d: %s-%d: %s %s",
                bid,
                perr.topic,
                perr.partition,
                _code_name(perr.error_code),
                perr.error_message,
            )
        if len(errs) > LOGGED_PARTITION_ERRORS:
            log.warning(
                "broker %d: %d more partition errors in its %s answer",
                bid,
                len(errs) - LOGGED_PARTITION_ERRORS,
                type(request).__name__,
            )
        if self._on_leader_and_isr is None or not isinstance(
            request, broker_pb2.LeaderAndIsrRequest
        ):
            return
        refused: dict[PartitionKey, str] = {}
        applied: list[PartitionKey] = []
        for a, perr in zip(request.partitions, response.partitions, strict=False):
            key = (a.topic, a.state.partition)
            if perr.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                refused[key] = a.topic_id
            elif perr.error_code == ErrorCode.NONE:
                applied.append(key)
        self._on_leader_and_isr(self.broker, refused, applied)

    async def _call(self, request: ControlRequest) -> Any:
        timeout = rpc_timeout_s(request)
        if isinstance(request, broker_pb2.LeaderAndIsrRequest):
            return await self._stub.LeaderAndIsr(request, timeout=timeout)
        if isinstance(request, broker_pb2.UpdateMetadataRequest):
            return await self._stub.UpdateMetadata(request, timeout=timeout)
        return await self._stub.StopReplica(request, timeout=timeout)

    async def _watch_liveness(self, liveness: Liveness) -> None:
        """Hold the ControllerLiveness stream; report the broker dead when the stream breaks
        and its address refuses connections (module doc)."""
        b = self.broker
        request = broker_pb2.ControllerLivenessRequest(
            controller_id=liveness.controller_id,
            controller_epoch=liveness.controller_epoch,
            broker_epoch=b.epoch,
        )
        backoff = 0.05
        while True:
            try:
                async for response in self._stub.ControllerLiveness(request):
                    exc = errors.error_for_code(response.error_code, response.error_message)
                    if isinstance(
                        exc, errors.StaleControllerEpochError | errors.StaleBrokerEpochError
                    ):
                        log.info("broker %d refused the liveness stream: %s", b.broker_id, exc)
                        return
                    if exc is not None:  # e.g. still registering: ask again
                        break
                    backoff = 0.05  # the stream is up
            except grpc.RpcError as rpc_err:
                if rpc_err.code() == grpc.StatusCode.UNIMPLEMENTED:  # an older broker
                    log.info("broker %d has no liveness stream; the lease alone", b.broker_id)
                    return
                log.debug("liveness stream to broker %d broke: %s", b.broker_id, rpc_err)
            if await connection_refused(b.host, b.port):
                log.warning(
                    "broker %d (epoch %d): connection reset and %s:%d refuses connections; "
                    "reporting it dead",
                    b.broker_id,
                    b.epoch,
                    b.host,
                    b.port,
                )
                liveness.on_death(b)
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def close(self) -> None:
        for task in (self._task, self._watch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._channel.close()


class BrokerChannels:
    """Links to every live broker. Called only from the controller's event-loop task."""

    def __init__(self, credentials: grpc.ChannelCredentials | None = None) -> None:
        self._links: dict[int, BrokerLink] = {}
        self.credentials = credentials
        #: set by the controller while active: new links watch their broker's liveness
        self.liveness: Liveness | None = None
        #: set by the controller: told of every answered LeaderAndIsr (module doc)
        self.on_leader_and_isr: OutcomeCallback | None = None

    async def sync(self, brokers: Mapping[int, Broker]) -> None:
        """Open links to new registrations, close links of gone or re-registered brokers."""
        for bid in list(self._links):
            link = self._links[bid]
            if brokers.get(bid) != link.broker:
                del self._links[bid]
                await link.close()
        for bid, broker in brokers.items():
            if bid not in self._links:
                self._links[bid] = BrokerLink(
                    broker, self.credentials, self.liveness, self.on_leader_and_isr
                )

    def send(self, broker_id: int, request: ControlRequest) -> None:
        link = self._links.get(broker_id)
        if link is None:
            log.debug("no link to broker %d; dropping %s", broker_id, type(request).__name__)
            return
        link.send(request)

    def link(self, broker_id: int) -> BrokerLink | None:
        return self._links.get(broker_id)

    async def close(self) -> None:
        links, self._links = list(self._links.values()), {}
        for link in links:
            await link.close()
