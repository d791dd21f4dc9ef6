"""ISR management on the leader: shrink lagging followers, expand caught-up ones, through the
controller only.

Rules (Kafka's, with Headwater's etcd controller):

* shrink: every ``lag_ms / 2`` the ``broker-isr-shrink`` pass asks each led partition for ISR
  followers that have not caught up to the leader's log end offset within
  ``replica.lag.time.max.ms`` (``Partition.out_of_sync``) and proposes the ISR without them;
* expand: the replica-fetch handler proposes ``ISR + follower`` when a fetch shows a follower
  in the replica set has caught up to the high watermark (``Partition.record_follower_fetch``);
  the same pass proposes it for a follower of an incremental fetch session that has caught up
  (``Partition.rejoining_followers``: an idle session does not name the partition again, so a
  proposal the controller refused would otherwise not be made again), if the session's
  requests show it caught up within ``replica.lag.time.max.ms`` (not a hung follower's);
* a proposal is an AlterPartition to the active controller carrying the leader epoch and the
  partition epoch the leader saw; the controller applies it with a compare-and-swap in etcd.
  The ISR changes here **only** when the controller answers with the new state (new partition
  epoch) — never locally first. One proposal per partition is in flight at a time
  (``Partition.pending_isr``); while it is, the high watermark is computed over the ISR plus
  any joining replica (the conservative "maximal ISR").

The ``broker-alter-partition`` task (:meth:`IsrManager.run_sender`) owns the queue: it sends
every queued proposal in one request, retries whole-request failures (no controller known,
unreachable, NOT_CONTROLLER, a broker epoch not yet known) with backoff, and per partition
adopts the returned state (when it is for the same leader epoch and newer) or drops the
proposal on a definitive refusal (the next LeaderAndIsr or pass decides again).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc

from headwater.v1 import controller_pb2, controller_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.partition import LeaderState, Partition
from services.broker.replication.peers import Peers

log = logging.getLogger(__name__)

Key = tuple[str, int]
RETRIABLE = {
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.STALE_BROKER_EPOCH,
    ErrorCode.NETWORK_EXCEPTION,
}
RPC_TIMEOUT_S = 5.0
#: Most proposals in one AlterPartition (the controller's per-field request limit is 10 000;
#: the rest follow in the next request).
MAX_ITEMS_PER_REQUEST = 5_000
MAX_BACKOFF_S = 1.0


def now_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass(frozen=True)
class Proposal:
    partition: Partition
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]

    def current(self) -> bool:
        """Still this leadership's pending proposal (no LeaderAndIsr reset it)."""
        p = self.partition
        return (
            p.is_leader and p.leader_epoch == self.leader_epoch and (p.pending_isr == self.new_isr)
        )


class IsrManager:
    """Proposes ISR changes for partitions this broker leads (see module doc)."""

    def __init__(
        self,
        broker_id: int,
        *,
        partitions: Callable[[], Iterable[Partition]],
        broker_epoch: Callable[[], int | None],
        peers: Peers,
        lag_ms: int,
    ) -> None:
        self.broker_id = broker_id
        self._partitions = partitions
        self._broker_epoch = broker_epoch
        self._peers = peers
        self.lag_ms = lag_ms
        self._queue: dict[Key, Proposal] = {}
        self._wake = asyncio.Event()

    # ---- proposals (any code on the loop)

    def propose(self, p: Partition, new_isr: Iterable[int]) -> bool:
        """Queue an ISR change unless one is pending; True when queued."""
        isr = tuple(new_isr)
        if not p.is_leader or p.pending_isr is not None or isr == p.isr:
            return False
        p.pending_isr = isr
        self._queue[p.key] = Proposal(p, p.leader_epoch, p.partition_epoch, isr)
        self._wake.set()
        log.info("%r: proposing ISR %s (now %s)", p, list(isr), list(p.isr))
        return True

    def expand(self, p: Partition, replica: int) -> bool:
        """Propose ``replica`` joining the ISR (order: the replica list's)."""
        members = set(p.isr) | {replica}
        return self.propose(p, [r for r in p.replicas if r in members])

    def shrink_pass(self, now: float | None = None) -> int:
        """Propose removing lagging followers from every led partition, or adding a caught-up
        session follower (see the module doc); how many proposed."""
        t = now_ms() if now is None else now
        n = 0
        for p in self._partitions():
            out = p.out_of_sync(t, self.lag_ms)
            if out and p.pending_isr is None:
                n += self.propose(p, [r for r in p.isr if r not in out])
            elif len(p.isr) < len(p.replicas):
                for r in p.rejoining_followers(t, self.lag_ms)[:1]:
                    n += self.expand(p, r)
        return n

    # ---- tasks

    async def run_shrink(self) -> None:
        """``broker-isr-shrink``: the shrink pass every lag/2."""
        interval = max(self.lag_ms / 2000.0, 0.05)
        while True:
            await asyncio.sleep(interval)
            self.shrink_pass()

    async def run_sender(self) -> None:
        """``broker-alter-partition``: sends queued proposals to the controller."""
        backoff = 0.05
        while True:
            await self._wake.wait()
            self._wake.clear()
            for key, prop in list(self._queue.items()):
                if not prop.current():
                    del self._queue[key]
            if not self._queue:
                continue
            if await self._send_once():
                backoff = 0.05
            else:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            if self._queue:
                self._wake.set()

    async def _send_once(self) -> bool:
        """One AlterPartition with the queued proposals (at most :data:`MAX_ITEMS_PER_REQUEST`;
        the loop sends the rest next); False to retry after a backoff."""
        address = self._peers.controller_address()
        epoch = self._broker_epoch()
        if address is None or epoch is None:
            return False
        sent = dict(itertools.islice(self._queue.items(), MAX_ITEMS_PER_REQUEST))
        req = controller_pb2.AlterPartitionRequest(
            broker_id=self.broker_id,
            broker_epoch=epoch,
            partitions=[
                controller_pb2.AlterPartitionItem(
                    topic=k[0],
                    partition=k[1],
                    leader_epoch=pr.leader_epoch,
                    partition_epoch=pr.partition_epoch,
                    new_isr=list(pr.new_isr),
                )
                for k, pr in sent.items()
            ],
        )
        stub = controller_pb2_grpc.ControllerStub(self._peers.channel(address))
        try:
            resp = await stub.AlterPartition(req, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as exc:
            log.warning("AlterPartition to %s failed: %s", address, exc.code())
            return False
        if resp.error_code != ErrorCode.NONE:
            log.warning("AlterPartition refused: %s", ErrorCode.Name(resp.error_code))
            return False
        retry = False
        for r in resp.partitions:
            key = (r.topic, r.partition)
            prop = sent.get(key)
            if prop is None or self._queue.get(key) is not prop:
                continue
            p = prop.partition
            if r.HasField("state") and r.state.leader == self.broker_id:
                s = r.state
                p.apply_isr_change(
                    LeaderState(
                        s.leader, s.leader_epoch, s.partition_epoch, tuple(s.replicas), tuple(s.isr)
                    )
                )
            if r.error_code in RETRIABLE:
                retry = True
                continue
            del self._queue[key]
            if r.error_code != ErrorCode.NONE:
                log.warning(
                    "%r: AlterPartition %s refused: %s %s",
                    p,
                    list(prop.new_isr),
                    ErrorCode.Name(r.error_code),
                    r.error_message,
                )
            if p.pending_isr == prop.new_isr:
                p.pending_isr = None  # refused or already in effect: decide again later
        return not retry
