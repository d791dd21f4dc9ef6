"""The producer's sender: drains ready batches and sends one ProduceRequest per leader.

Shape (aiokafka's): one sender routine per producer drains the accumulator, groups ready
batches by partition leader and starts one request task per leader, with at most
``max_in_flight`` requests outstanding per broker. Each request carries many partitions (and
several consecutive batches of one partition concatenated in one ``PartitionRecords``; their
offsets follow each other, so batch k starts at ``base_offset + sum(counts before k)``).

Outcomes, per partition result:

* ``NONE``: every waiter is resolved (record ``i`` -> ``base_offset + i``);
* retriable (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS, network errors,
  ...): the batch goes back to the head of its partition queue after ``retry_backoff_ms``,
  with a metadata refresh first when the error says metadata is stale, until ``retries`` or
  ``delivery_timeout_ms`` runs out; once the metadata names another leader than the broker
  that failed, the batch is sent there without waiting out the backoff (Kafka's KIP-951: the
  backoff spares the broker that failed, a new leader is tried at once);
* anything else (MESSAGE_TOO_LARGE, INVALID_CONFIG, CORRUPT_MESSAGE, authorization, ...): the
  waiters fail at once with the typed exception of :mod:`headwater.errors`.

With ``acks=0`` waiters are resolved (offset -1) as soon as the request is handed to gRPC and
the answer is ignored. With ``max_in_flight == 1`` a partition is muted while it has a request
in flight, so retries cannot reorder its records (without idempotence, a larger
``max_in_flight`` may reorder a partition's records on retries, as in Kafka). A response's
``throttle_time_ms`` holds back requests to that broker until the delay has passed.

Order without idempotence: gRPC handles concurrent calls to one broker in any order, and a
non-idempotent batch has no sequence the broker could check, so with ``max_in_flight > 1``
the sender numbers its requests to each broker (``ProduceRequest.order_key``, one random key
per sender; ``order_number`` 1, 2, ...; ``order_after``, the latest of its requests to that
broker still unanswered) and the broker appends each after the one it names
(:mod:`services.broker.request_order`): a partition's records land in the order they were
sent, as on Kafka's connection, while five requests stay in flight. The broker holds a request
at most 1 s for the earlier one; a request that has not reached it by then (or a retry) may
land out of order, as retries may in Kafka.

Idempotence (``producing`` given, docs/transactions.md): the routine first gets a producer id
(``Broker.InitProducerId`` on any broker, or the transaction manager's id), then drains with
:class:`headwater.client.idempotence.Producing`: batches get sequence numbers as they are
drained and up to ``max_in_flight`` (<= 5) batches of a partition are unresolved at once,
one batch of a replicated partition per request as far as the broker's free request slots
allow (``_requests_of``; Kafka's five in flight per partition, one batch per request; the broker
remembers the last 5 batches of a producer to answer a resend as a duplicate). gRPC calls to
one broker are concurrent, so a later request may reach the broker first; it is then answered
OUT_OF_ORDER_SEQUENCE_NUMBER and resent in order. Results, per partition entry: success (fresh
or duplicate: the broker answers the original offset) acknowledges the sequences; an in-band
error means the broker appended nothing of the entry, except REQUEST_TIMED_OUT,
NOT_ENOUGH_REPLICAS_AFTER_APPEND and NOT_LEADER_OR_FOLLOWER (``MAYBE_APPENDED``), which the
broker also answers when the acks=all wait after an append fails: their outcome is unknown,
as after a transport error. A retriable one re-enqueues the batches
in sequence order, and a retried batch is resent alone once it is the oldest unresolved batch
of its partition (Kafka's rule: retries reduce the partition to one in flight until it is in
order again). A terminal one drops the batch's sequences (``Sequencer.drop``: later batches
move down and are re-stamped). OUT_OF_ORDER_SEQUENCE_NUMBER (and UNKNOWN_PRODUCER_ID) is fatal
when the predecessor was acknowledged before the batch was sent, retriable otherwise;
INVALID_PRODUCER_EPOCH / PRODUCER_FENCED are fatal. Fatal errors put the producer in a failed
state (``Sequencer.fail``) and fail every pending batch. A transport error leaves the outcome
unknown: the batch is retried (a duplicate answer tells), and if it fails for good the
partition can continue neither way (``idempotence.unknown_outcome``).

Ownership: the sender routine and its request tasks run on the producer's loop; they are the
only code that takes batches out of the accumulator. If the routine dies, the producer's
done-callback fails every pending future (callers never hang).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import OrderedDict
from itertools import chain

import grpc

from headwater import errors, timeouts
from headwater.client import idempotence, produce_wire
from headwater.client.accumulator import Accumulator, ProducerBatch
from headwater.client.connection import ConnectionPool
from headwater.client.metadata import ClusterView, Metadata
from headwater.client.types import TopicPartition
from headwater.v1 import broker_pb2, transaction_pb2

log = logging.getLogger(__name__)


#: In-band produce errors a broker also answers after appending the entry, when the acks=all
#: wait for the followers fails (``services/broker/partition.py`` ``Partition.append``): the
#: records may be in the log although the answer is an error.
MAYBE_APPENDED = (
    errors.RequestTimedOutError,
    errors.NotEnoughReplicasAfterAppendError,
    errors.NotLeaderOrFollowerError,
)


class Sender:
    """The sender routine and its request tasks (see module docstring)."""

    def __init__(
        self,
        acc: Accumulator,
        metadata: Metadata,
        pool: ConnectionPool,
        *,
        acks: int,
        max_in_flight: int,
        request_timeout_ms: int,
        retries: int,
        retry_backoff_ms: int,
        max_request_size: int,
        client_id: str,
        producing: idempotence.Producing | None = None,
        transactional_id: str = "",
    ) -> None:
        self.acc = acc
        self.metadata = metadata
        self.pool = pool
        self.acks = acks
        self.max_in_flight = max_in_flight
        self.timeout_ms = request_timeout_ms
        self.retries = retries
        self.backoff = retry_backoff_ms / 1000
        self.max_request_size = max_request_size
        self.client_id = client_id
        self.in_flight: dict[int, int] = {}
        self.throttled_until: dict[int, float] = {}
        self.muted: set[TopicPartition] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.closing = False
        self.producing = producing
        self.transactional_id = transactional_id
        #: batches whose earlier attempt may have been appended (a transport error)
        self.uncertain: set[ProducerBatch] = set()
        #: leaders a request could not reach (a transport error) and that have not answered
        #: since: while a refreshed view still lists one, the view may predate its failover
        self.unreachable: set[int] = set()
        #: requests numbered for the broker's order wait (non-idempotent, several in flight):
        #: the key, the last number given per leader, the numbers still unanswered per leader
        self.order_key = secrets.randbits(63) | 1 if producing is None and max_in_flight > 1 else 0
        self._order_last: dict[int, int] = {}
        self._unanswered: dict[int, set[int]] = {}
        self._wake = asyncio.Event()
        acc.wakeup = self._wake.set
        metadata.add_listener(self._metadata_changed)

    def _metadata_changed(self, view: ClusterView) -> None:
        """A refreshed view: send what it makes sendable. While it still lists a leader that
        could not be reached and batches wait, ask for another refresh (paced by the retry
        backoff): the controller's new leaders reach the brokers moments after a leader dies,
        and the batches' own retries would otherwise ask only after their backoff and one
        more failure on the dead broker."""
        self._wake.set()
        if self.unreachable:
            self.unreachable.intersection_update(view.brokers)
            if self.unreachable and self.acc.incomplete:
                self.metadata.request_update()

    def wake(self) -> None:
        self._wake.set()

    def _can_send(self, leader: int) -> bool:
        if self.in_flight.get(leader, 0) >= self.max_in_flight:
            return False
        until = self.throttled_until.get(leader)
        return until is None or until <= self.acc.clock()

    async def run(self) -> None:
        """Loop until closing and nothing is left to send or await."""
        loop = asyncio.get_running_loop()
        view = self.metadata
        producing = self.producing
        if producing is not None and not producing.seq.has_pid and not self.transactional_id:
            await self._init_producer_id(producing.seq)
        while True:
            self._wake.clear()
            if producing is not None and producing.seq.failed is not None:
                self.acc.fail_all(producing.seq.failed)
            batches, next_at, unknown = self.acc.drain(
                lambda tp: view.view.leader(tp),
                self._can_send,
                self.muted,
                self.max_request_size,
                producing,
            )
            if unknown:
                self.metadata.request_update()
            else:
                self.metadata.maybe_refresh()
            for leader, drained in batches.items():
                for taken in self._requests_of(leader, drained):
                    self.in_flight[leader] = self.in_flight.get(leader, 0) + 1
                    if self.max_in_flight == 1:
                        self.muted.update(b.tp for b in taken)
                    task = loop.create_task(
                        self._request(leader, taken, self._order_of_next(leader)),
                        name=f"produce-{leader}",
                    )
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
            if self.closing and not self.acc.incomplete and not self.tasks:
                return
            now = self.acc.clock()
            timeout = None if next_at is None else max(0.0, next_at - now)
            for until in self.throttled_until.values():
                if until > now:
                    timeout = until - now if timeout is None else min(timeout, until - now)
            if unknown:
                timeout = self.backoff if timeout is None else min(timeout, self.backoff)
            if timeout is None:
                await self._wake.wait()
            elif timeout > 0:
                with contextlib.suppress(TimeoutError):
                    await timeouts.wait_for(self._wake.wait(), timeout)

    def _requests_of(self, leader: int, drained: list[ProducerBatch]) -> list[list[ProducerBatch]]:
        """The requests for one leader's drained batches (at most ``max_request_size`` of
        them: the drain's bound). Idempotent: request ``k`` carries the ``k``-th batch of each
        replicated partition (Kafka's one batch per partition per request), as many requests
        as the broker's free slots allow (the rest go in the last one), so the leader
        appends, and followers fetch, each batch as it arrives instead of a partition's
        batches all at once. A partition without followers has nothing to gain from that and
        pays the broker's fixed cost per request: its batches go in the first request.
        Measured (docs/benchmarks.md "Session 35"): RF=1 p=1 1 KiB acks=all 421k → 554k
        records/s with its 4 MiB batches merged in pairs; RF=3 with 1 MiB batches 121k split
        against 81k merged."""
        if self.producing is None or len(drained) == 1:
            return [drained]
        slots = max(1, self.max_in_flight - self.in_flight.get(leader, 0))
        replicated = self.metadata.view.replicated
        seen: dict[TopicPartition, int] = {}
        parts: list[list[ProducerBatch]] = []
        for b in drained:
            k = min(seen.get(b.tp, 0), slots - 1) if replicated(b.tp) else 0
            seen[b.tp] = k + 1
            if k == len(parts):
                parts.append([])
            parts[k].append(b)
        return parts

    async def _init_producer_id(self, seq: idempotence.Sequencer) -> None:
        """Broker.InitProducerId on any broker, retrying retriable errors until it answers
        (a non-retriable answer puts the producer in the failed state)."""
        request = transaction_pb2.InitProducerIdRequest(
            transactional_id="", transaction_timeout_ms=0, producer_id=-1, producer_epoch=-1
        )
        while not self.closing:
            err: errors.HeadwaterError = errors.BrokerNotAvailableError("no broker known")
            view = self.metadata.view
            if not view.brokers:
                try:
                    view = await self.metadata.refresh()
                except errors.HeadwaterError as exc:
                    err = exc
            for b in view.brokers.values():
                try:
                    resp = await self.pool.broker(f"{b.host}:{b.port}").InitProducerId(
                        request, timeout=self.timeout_ms / 1000
                    )
                except grpc.RpcError as exc:
                    err = errors.from_rpc_error(exc)
                    continue
                if resp.error_code == 0:
                    seq.reset(resp.producer_id, resp.producer_epoch)
                    return
                found = errors.error_for_code(resp.error_code, resp.error_message)
                assert found is not None
                err = found
                if not err.retriable:
                    seq.fail(err)
                    return
            log.debug("InitProducerId failed (%s); retrying", err)
            await asyncio.sleep(self.backoff)

    def _order_of_next(self, leader: int) -> tuple[int, int, int]:
        """(order_key, order_number, order_after) of the next request to ``leader``, which is
        unanswered from now until :meth:`_request` ends; (0, 0, 0) when not numbering."""
        if not self.order_key:
            return (0, 0, 0)
        number = self._order_last[leader] = self._order_last.get(leader, 0) + 1
        pending = self._unanswered.setdefault(leader, set())
        after = max(pending) if pending else 0
        pending.add(number)
        return (self.order_key, number, after)

    async def _request(
        self, leader: int, batches: list[ProducerBatch], order: tuple[int, int, int]
    ) -> None:
        try:
            await self._send(leader, batches, order)
        except asyncio.CancelledError:
            for b in batches:
                self.acc.fail(b, errors.NetworkError("producer closed with the request in flight"))
            raise
        except Exception as exc:  # a bug or an unexpected library error: never hang callers
            log.exception("produce request to broker %d failed unexpectedly", leader)
            for b in batches:
                self.acc.fail(b, exc)
            if self.producing is not None and any(b.base_seq >= 0 for b in batches):
                # they stay in their partitions' windows: whether they landed is unknown
                idempotence.unknown_outcome(self.producing, exc)
        finally:
            if order[1]:
                self._unanswered[leader].discard(order[1])
            self.in_flight[leader] -= 1
            for b in batches:
                self.muted.discard(b.tp)
            self._wake.set()

    async def _send(
        self, leader: int, batches: list[ProducerBatch], order: tuple[int, int, int]
    ) -> None:
        by_tp: OrderedDict[TopicPartition, list[ProducerBatch]] = OrderedDict()
        for b in batches:
            by_tp.setdefault(b.tp, []).append(b)
        request = produce_wire.encode_produce_request(
            acks=self.acks,
            timeout_ms=self.timeout_ms,
            client_id=self.client_id,
            transactional_id=self.transactional_id,
            order=order,
            partitions=[
                (tp.topic, tp.partition, list(chain.from_iterable(b.pieces or () for b in bs)))
                for tp, bs in by_tp.items()
            ],
            records_lens=[sum(b.encoded_size for b in bs) for bs in by_tp.values()],
        )
        address = self.metadata.view.address(leader)
        if address is None:
            self._retry_or_fail(
                batches, errors.BrokerNotAvailableError(f"broker {leader} gone"), leader=leader
            )
            return
        call = self.pool.raw_produce(address)(request, timeout=self.timeout_ms / 1000 + 5)
        if self.acks == broker_pb2.ACKS_NONE:
            for b in batches:
                self.acc.complete(b, -1)
        try:
            response = await call
        except grpc.RpcError as exc:
            err = errors.from_rpc_error(exc)
            if isinstance(err, errors.NetworkError):
                self.unreachable.add(leader)
            if self.acks != broker_pb2.ACKS_NONE:
                if self.producing is not None:
                    self.uncertain.update(batches)
                self._retry_or_fail(batches, err, leader=leader)
            else:
                log.warning("acks=0 produce to broker %d failed: %s", leader, err)
            return
        self.unreachable.discard(leader)
        if response.throttle_time_ms > 0:
            self.throttled_until[leader] = self.acc.clock() + response.throttle_time_ms / 1000
        if self.acks == broker_pb2.ACKS_NONE:
            return
        for r in response.partitions:
            tp_batches = by_tp.pop(TopicPartition(r.topic, r.partition), None)
            if tp_batches is None:
                continue
            if r.error_code == 0:
                offset = r.base_offset
                for b in tp_batches:
                    if self.producing is not None:
                        self.producing.seq.acked(b)
                        self.uncertain.discard(b)
                    self.acc.complete(b, offset, r.log_append_time)
                    offset += b.count
            else:
                perr = errors.error_for_code(r.error_code, r.error_message)
                assert perr is not None
                if self.producing is not None:
                    self._idempotent_error(tp_batches, perr, leader)
                else:
                    self._retry_or_fail(tp_batches, perr, leader=leader)
        for _tp, left in by_tp.items():
            self._retry_or_fail(
                left, errors.UnknownServerError("no result for partition"), leader=leader
            )

    def _idempotent_error(
        self, batches: list[ProducerBatch], err: errors.HeadwaterError, leader: int
    ) -> None:
        """An in-band error for one partition's batches from ``leader``: the broker appended
        none of them, except after an append whose acks=all wait failed
        (:data:`MAYBE_APPENDED`): those batches' outcome is unknown until a retry is answered,
        so failing for good they never release their sequences (a later batch given them would
        be answered as their duplicate, its own records never written)."""
        assert self.producing is not None
        if isinstance(err, MAYBE_APPENDED):
            self.uncertain.update(batches)
        first = batches[0]
        if isinstance(
            err, errors.OutOfOrderSequenceNumberError | errors.UnknownProducerIdError
        ) and not (first.pred_acked and not first.restamp):
            # an earlier batch was still unacknowledged when this one was sent (or this one
            # moved down since): it may simply have overtaken it; resend in order
            self._retry_or_fail(batches, err, leader=leader, force_retry=True)
            return
        if idempotence.is_fatal(err) or isinstance(
            err, errors.OutOfOrderSequenceNumberError | errors.UnknownProducerIdError
        ):
            self._fatal(err)
            return
        self._retry_or_fail(batches, err, leader=leader)

    def _fatal(self, err: errors.HeadwaterError) -> None:
        assert self.producing is not None
        log.error("idempotent producer failed: %s", err)
        self.producing.seq.fail(err)
        self.acc.fail_all(self.producing.seq.failed or err)

    def _retry_or_fail(
        self,
        batches: list[ProducerBatch],
        err: errors.HeadwaterError,
        *,
        leader: int = -1,
        force_retry: bool = False,
    ) -> None:
        """Re-enqueue the retriable ones (after ``retry_backoff_ms``, or at once when another
        broker than ``leader``, which answered or failed, leads the partition), fail the
        rest; a stale-metadata error asks for a refresh."""
        stale = False
        retriable = err.retriable or force_retry
        failed: list[ProducerBatch] = []
        # reversed: re-enqueueing at the head keeps the partition's original order
        for b in reversed(batches):
            if retriable and b.attempts < self.retries and not self.acc.expired(b):
                log.debug("retrying batch for %s after %s", b.tp, err)
                self.acc.note_retry(f"{b.tp.topic}-{b.tp.partition}: {err}")
                stale = stale or err.invalid_metadata
                self.acc.reenqueue(b, self.acc.clock() + self.backoff, leader)
            else:
                failed.append(b)
                self.acc.fail(b, err)
        if failed and self.producing is not None:
            self._sequenced_failed(failed[::-1], err)
        if stale or isinstance(err, errors.MessageTooLargeError):
            # MESSAGE_TOO_LARGE: the topic's max.message.bytes may have been lowered; new
            # batches keep within the limit the refreshed metadata shows (limit_batches)
            self.metadata.request_update()

    def _sequenced_failed(self, failed: list[ProducerBatch], err: errors.HeadwaterError) -> None:
        """Terminal failure of sequenced batches: release their sequences when the broker
        surely appended none of them, else the outcome is unknown."""
        assert self.producing is not None
        seqd = [b for b in failed if b.base_seq >= 0]
        if not seqd:
            return
        if any(b in self.uncertain for b in seqd):
            self.uncertain.difference_update(seqd)
            idempotence.unknown_outcome(self.producing, err)
            return
        try:
            for b in seqd:
                self.producing.seq.drop(b)
        except errors.HeadwaterError as exc:
            idempotence.unknown_outcome(self.producing, exc)

    async def close(self, timeout_s: float | None) -> None:
        """Cancel outstanding request tasks (after ``flush`` they are normally none)."""
        self.closing = True
        self._wake.set()
        tasks = list(self.tasks)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)
