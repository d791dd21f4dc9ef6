"""The client's metadata refresh schedule (fast, pure logic: a stub answers Metadata)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater.client.metadata import Metadata, view_from_response
from headwater.client.types import TopicPartition
from headwater.v1 import metadata_pb2
from tests.client.sender_helpers import accumulator
from tests.client.sender_helpers import sender as make_sender

pytestmark = pytest.mark.fast

WAIT_S = 5.0  # bound on every wait for an event (never reached when the code is right)


class StubBroker:
    """Answers Metadata; each call is counted and may be held until ``gate`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.called = asyncio.Event()
        self.gate = asyncio.Event()
        self.gate.set()

    async def Metadata(self, _req: Any, timeout: float) -> metadata_pb2.MetadataResponse:
        self.calls += 1
        self.called.set()
        await self.gate.wait()
        return metadata_pb2.MetadataResponse(
            brokers=[metadata_pb2.BrokerInfo(broker_id=1, host="127.0.0.1", port=9)]
        )


class StubPool:
    def __init__(self, broker: StubBroker) -> None:
        self._broker = broker

    def broker(self, _address: str) -> StubBroker:
        return self._broker


async def _called(stub: StubBroker, calls: int) -> None:
    async with asyncio.timeout(WAIT_S):
        while stub.calls < calls:
            stub.called.clear()
            await stub.called.wait()


def test_the_first_update_after_a_quiet_spell_refreshes_at_once() -> None:
    """The backoff counts from the previous attempt: with none before it, a reported stale
    leader is looked up at once, not after ``retry_backoff_ms``."""

    async def body() -> None:
        stub = StubBroker()
        md = Metadata(StubPool(stub), ["127.0.0.1:9"], retry_backoff_ms=600_000)  # type: ignore[arg-type]
        md.request_update()
        await _called(stub, 1)
        await md.close()

    asyncio.run(body())


def test_an_update_asked_during_a_refresh_gets_one_more_refresh_after_it() -> None:
    """A refresh in flight may answer with what a broker knew before the caller's failure:
    an update asked meanwhile is not dropped but followed by one more refresh, and no more."""

    async def body() -> None:
        stub = StubBroker()
        md = Metadata(StubPool(stub), ["127.0.0.1:9"], retry_backoff_ms=10)  # type: ignore[arg-type]
        stub.gate.clear()
        md.request_update()
        await _called(stub, 1)
        md.request_update()  # during the first refresh
        md.request_update()  # a second report changes nothing: one refresh follows
        stub.gate.set()
        await _called(stub, 2)
        background = md._background
        assert background is not None
        async with asyncio.timeout(WAIT_S):
            await background
        assert stub.calls == 2
        assert md.view.brokers.keys() == {1}
        await md.close()

    asyncio.run(body())


def test_a_view_that_still_lists_an_unreachable_leader_is_refreshed_again() -> None:
    """While batches wait and a refreshed view still lists a leader the producer could not
    reach, the sender asks for one more refresh (the view may predate the failover); a view
    that no longer lists it ends that."""

    async def body() -> None:
        stub = StubBroker()
        md = Metadata(StubPool(stub), ["127.0.0.1:9"], retry_backoff_ms=10)  # type: ignore[arg-type]
        acc = accumulator(linger_ms=0)
        sender = make_sender(acc, md, StubPool(stub), retry_backoff_ms=10)
        acc.try_reserve(100)
        waiter = asyncio.get_running_loop().create_future()
        acc.append(TopicPartition("t", 0), b"v", None, None, 1, 10, waiter)
        sender.unreachable.add(1)  # a produce to broker 1 failed in transport
        await md.refresh()  # its answer still lists broker 1
        stub.gate.clear()
        await _called(stub, 2)  # the refresh that follows, held at the stub
        sender.unreachable = {7}  # meanwhile: a leader its answer does not list
        background = md._background
        assert background is not None
        stub.gate.set()
        async with asyncio.timeout(WAIT_S):
            await background
        assert stub.calls == 2 and sender.unreachable == set()
        await md.close()

    asyncio.run(body())


def test_a_view_tells_a_partition_with_followers_from_one_without() -> None:
    """``ClusterView.replicated`` (the sender's choice between one batch of a partition per
    request and one request for them all): more than one replica, whatever the ISR."""
    state = metadata_pb2.PartitionState
    view = view_from_response(
        metadata_pb2.MetadataResponse(
            brokers=[metadata_pb2.BrokerInfo(broker_id=1, host="127.0.0.1", port=9)],
            topics=[
                metadata_pb2.TopicMetadata(
                    name="t",
                    partitions=[
                        state(partition=0, leader=1, replicas=[1], isr=[1]),
                        state(partition=1, leader=1, replicas=[1, 2, 3], isr=[1]),
                    ],
                )
            ],
        )
    )
    assert not view.replicated(TopicPartition("t", 0))
    assert view.replicated(TopicPartition("t", 1))
    assert not view.replicated(TopicPartition("t", 2))  # unknown partition
    assert not view.replicated(TopicPartition("u", 0))  # unknown topic
