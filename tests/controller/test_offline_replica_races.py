"""Offline replica marks as the controller's event loop keeps them (review of issue 17 item 4):
an answer that shows the broker now hosts a refused partition must clear its mark, and no
election may hand leadership back to a replica still marked offline.

In-process: a ControllerLoop with a hand-built cluster state, its etcd write replaced by one
that adopts the fenced states as written (no etcd, no links: what it sends is dropped)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from headwater.platform.cluster_layout import Topic
from headwater.platform.etcd import EtcdError
from headwater.v1 import broker_pb2, controller_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.controller import cluster_state as cs
from services.controller import operations
from services.controller import state as st
from services.controller.events import ControllerLoop

pytestmark = pytest.mark.fast

KEY = ("t", 0)
TOPIC_ID = "id1"
B1 = st.Broker(1, "127.0.0.1", 1, "", "", 101)


def _loop(monkeypatch: pytest.MonkeyPatch, replicas: list[int]) -> ControllerLoop:
    loop = ControllerLoop(
        None,  # type: ignore[arg-type]  # never reached: write is replaced below
        controller_id=9,
        host="127.0.0.1",
        port=1,
        auto_leader_rebalance=False,
        crash_detection=False,
    )
    state = cs.ClusterState()
    for bid in replicas:
        state.apply(cs.BrokerRegistered(dataclasses.replace(B1, broker_id=bid, epoch=100 + bid)))
    state.apply(cs.TopicCreated(Topic("t", TOPIC_ID, {0: list(replicas)}, {})))
    first = st.PartitionState(replicas[0], 1, tuple(replicas), 1, 4)
    state.apply(cs.PartitionChanged("t", 0, first))
    loop.state = state
    loop.epoch = 4

    async def write(changes: dict[tuple[str, int], st.PartitionState]) -> list[tuple[str, int]]:
        for (topic, p), s in changes.items():
            state.apply(cs.PartitionChanged(topic, p, s))
        return sorted(changes)

    monkeypatch.setattr(loop, "write", write)
    return loop


async def _drain(loop: ControllerLoop) -> None:
    while not loop._queue.empty():
        await loop._handle(loop._queue.get_nowait())


def test_an_answer_hosting_a_refused_partition_clears_its_mark_even_before_the_refusal_is_handled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        loop = _loop(monkeypatch, [1, 2, 3])
        b1 = loop.state.brokers[1]  # type: ignore[union-attr]
        # broker 1's link: one LeaderAndIsr answered with KAFKA_STORAGE_ERROR for t-0, then
        # the next one (already queued on the link) answered without error: it created t-0.
        # Both answers reach the controller before its event loop takes the first one.
        loop._leader_and_isr_answered(b1, {KEY: TOPIC_ID}, [])
        loop._leader_and_isr_answered(b1, {}, [KEY])
        await _drain(loop)
        # broker 1 hosts t-0: it must not stay an offline replica (never elected, dropped
        # from the ISR at every reconcile although it follows the leader)
        assert loop.offline.brokers(KEY, TOPIC_ID) == frozenset()
        assert len(loop.offline) == 0

    asyncio.run(asyncio.wait_for(body(), 10))


def test_preferred_rebalance_does_not_elect_a_replica_marked_offline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        loop = _loop(monkeypatch, [1])
        b1 = loop.state.brokers[1]  # type: ignore[union-attr]
        # the only replica refused the partition: no leader, the ISR keeps it (clean later)
        loop._leader_and_isr_answered(b1, {KEY: TOPIC_ID}, [])
        await _drain(loop)
        s = loop.state.partitions[KEY]  # type: ignore[union-attr]
        assert (s.leader, s.isr) == (-1, (1,))
        assert loop.offline.brokers(KEY, TOPIC_ID) == {1}
        # the automatic preferred-leader rebalance (broker 1 leads none of its preferred
        # partitions) must not hand t-0 back to the replica that does not exist: a refusal
        # of that LeaderAndIsr marks nothing new, so no reconcile would ever undo it
        moved = await operations.rebalance_leaders(loop)
        s = loop.state.partitions[KEY]  # type: ignore[union-attr]
        assert moved == [] and s.leader == -1, s

    asyncio.run(asyncio.wait_for(body(), 10))


def _recorded(
    loop: ControllerLoop, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[int, broker_pb2.LeaderAndIsrRequest]]:
    """The LeaderAndIsr requests the loop sends from now on, with their broker ids."""
    sent: list[tuple[int, broker_pb2.LeaderAndIsrRequest]] = []

    def send(bid: int, req: object) -> None:
        if isinstance(req, broker_pb2.LeaderAndIsrRequest):
            sent.append((bid, req))

    monkeypatch.setattr(loop.channels, "send", send)
    return sent


def test_the_refusing_broker_is_told_its_leadership_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Broker 1 leads t-0 and refuses its LeaderAndIsr (its leader-epoch checkpoint failed):
    leadership moves, and broker 1 is told so too, or it would keep leading (acks=1 produce
    from clients with old metadata, truncated later). Its repeated refusal changes nothing."""

    async def body() -> None:
        loop = _loop(monkeypatch, [1, 2, 3])
        b1 = loop.state.brokers[1]  # type: ignore[union-attr]
        sent = _recorded(loop, monkeypatch)
        loop._leader_and_isr_answered(b1, {KEY: TOPIC_ID}, [])
        await _drain(loop)
        s = loop.state.partitions[KEY]  # type: ignore[union-attr]
        assert s.leader == 2 and 1 not in s.isr, s
        told = {bid: [a.state.leader for a in req.partitions] for bid, req in sent}
        assert told == {1: [2], 2: [2], 3: [2]}
        sent.clear()
        loop._leader_and_isr_answered(b1, {KEY: TOPIC_ID}, [])  # refused again
        await _drain(loop)
        assert sent == [] and loop.state.partitions[KEY] == s  # type: ignore[index]

    asyncio.run(asyncio.wait_for(body(), 10))


def test_a_refusal_marked_before_reconciles_when_its_first_write_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The write moving t-0 away from broker 1 fails (etcd unavailable): the broker's next
    refusal marks nothing new but must still move the leadership."""

    async def body() -> None:
        loop = _loop(monkeypatch, [1, 2, 3])
        b1 = loop.state.brokers[1]  # type: ignore[union-attr]
        adopt = loop.write

        async def unavailable(changes: dict[tuple[str, int], st.PartitionState]) -> list[object]:
            raise EtcdError("etcd unavailable")

        monkeypatch.setattr(loop, "write", unavailable)
        loop._leader_and_isr_answered(b1, {KEY: TOPIC_ID}, [])
        with pytest.raises(EtcdError):
            await _drain(loop)
        assert loop.offline.brokers(KEY, TOPIC_ID) == {1}
        assert loop.state.partitions[KEY].leader == 1  # type: ignore[union-attr]
        monkeypatch.setattr(loop, "write", adopt)
        loop._leader_and_isr_answered(b1, {KEY: TOPIC_ID}, [])
        await _drain(loop)
        assert loop.state.partitions[KEY].leader == 2  # type: ignore[union-attr]

    asyncio.run(asyncio.wait_for(body(), 10))


def test_a_leader_cannot_add_a_replica_marked_offline_to_the_isr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Broker 3 refused t-0 (it does not host it): the controller took it out of the ISR, and
    an AlterPartition from the leader putting it back is refused INELIGIBLE_REPLICA (Kafka's
    KIP-841 rule for fenced and offline replicas) and changes nothing."""

    async def body() -> None:
        loop = _loop(monkeypatch, [1, 2, 3])
        b3 = loop.state.brokers[3]  # type: ignore[union-attr]
        loop._leader_and_isr_answered(b3, {KEY: TOPIC_ID}, [])
        await _drain(loop)
        s = loop.state.partitions[KEY]  # type: ignore[union-attr]
        assert (s.leader, s.isr) == (1, (1, 2)), s

        def alter(new_isr: list[int]) -> controller_pb2.AlterPartitionRequest:
            cur = loop.state.partitions[KEY]  # type: ignore[union-attr]
            return controller_pb2.AlterPartitionRequest(
                broker_id=1,
                broker_epoch=101,
                partitions=[
                    controller_pb2.AlterPartitionItem(
                        topic=KEY[0],
                        partition=KEY[1],
                        leader_epoch=cur.leader_epoch,
                        partition_epoch=cur.partition_epoch,
                        new_isr=new_isr,
                    )
                ],
            )

        resp = await operations.alter_partition(loop, alter([1, 2, 3]))
        (r,) = resp.partitions
        assert loop.state.partitions[KEY] == s, "the offline replica joined the ISR"  # type: ignore[union-attr]
        assert ErrorCode.Name(r.error_code) == "INELIGIBLE_REPLICA", r
        assert "3" in r.error_message and tuple(r.state.isr) == (1, 2)
        # the mark cleared (broker 3 now hosts t-0): the same proposal is accepted
        loop._leader_and_isr_answered(b3, {}, [KEY])
        await _drain(loop)
        (r,) = (await operations.alter_partition(loop, alter([1, 2, 3]))).partitions
        assert r.error_code == ErrorCode.NONE, r
        assert loop.state.partitions[KEY].isr == (1, 2, 3)  # type: ignore[union-attr]

    asyncio.run(asyncio.wait_for(body(), 10))
