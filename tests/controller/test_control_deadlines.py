"""Control request deadlines scale with the request (issue 17 item 4): a LeaderAndIsr naming
thousands of partitions is not cancelled and sent again after the one-partition deadline;
and a LeaderAndIsr answer's refused partitions reach the controller's callback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from headwater.v1 import broker_pb2, metadata_pb2
from headwater.v1.errors_pb2 import ErrorCode
from services.controller import broker_channels as bc
from services.controller import state as st
from tests.helpers.wait import async_wait_for


def lai(n: int) -> broker_pb2.LeaderAndIsrRequest:
    return broker_pb2.LeaderAndIsrRequest(
        partitions=[
            broker_pb2.PartitionAssignment(
                topic="t", topic_id="id", state=metadata_pb2.PartitionState(partition=p)
            )
            for p in range(n)
        ]
    )


@pytest.mark.fast
def test_the_deadline_grows_with_the_partitions_named_and_is_capped() -> None:
    one, many = bc.rpc_timeout_s(lai(1)), bc.rpc_timeout_s(lai(4000))
    assert one == bc.RPC_TIMEOUT_S == 15.0
    assert many == pytest.approx(15.0 + 3999 * bc.PER_PARTITION_S)
    assert many > 100.0
    assert bc.rpc_timeout_s(lai(0)) == 15.0
    assert bc.rpc_timeout_s(lai(100_000)) == bc.MAX_RPC_TIMEOUT_S
    stop = broker_pb2.StopReplicaRequest(
        partitions=[broker_pb2.StopReplicaPartition(topic="t", partition=p) for p in range(1000)]
    )
    assert bc.rpc_timeout_s(stop) == pytest.approx(15.0 + 999 * bc.PER_PARTITION_S)
    snapshot = broker_pb2.UpdateMetadataRequest(
        topics=[
            metadata_pb2.TopicMetadata(
                name="t",
                partitions=[metadata_pb2.PartitionState(partition=p) for p in range(10_000)],
            )
        ]
    )
    assert bc.rpc_timeout_s(snapshot) == pytest.approx(15.0 + 10_000 * bc.PER_METADATA_PARTITION_S)


class _Stub:
    """Answers LeaderAndIsr at once, refusing odd partitions; records each call's deadline."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    async def LeaderAndIsr(self, request: Any, timeout: float) -> Any:
        self.timeouts.append(timeout)
        return broker_pb2.LeaderAndIsrResponse(
            partitions=[
                broker_pb2.PartitionError(
                    topic=a.topic,
                    partition=a.state.partition,
                    error_code=ErrorCode.KAFKA_STORAGE_ERROR
                    if a.state.partition % 2
                    else ErrorCode.NONE,
                )
                for a in request.partitions
            ]
        )


def test_a_link_sends_with_the_scaled_deadline_and_reports_refused_partitions() -> None:
    async def scenario() -> None:
        outcomes: list[tuple[int, dict[tuple[str, int], str], list[tuple[str, int]]]] = []
        broker = st.Broker(2, "127.0.0.1", 1, "", "", 7)
        link = bc.BrokerLink(
            broker, on_leader_and_isr=lambda b, r, a: outcomes.append((b.broker_id, r, a))
        )
        stub = _Stub()
        link._stub = stub  # type: ignore[assignment]
        try:
            link.send(lai(4))
            link.send(lai(2000))
            await async_wait_for(_delivered(link, 2), timeout=10, what="both requests delivered")
        finally:
            await link.close()
        assert stub.timeouts == [bc.rpc_timeout_s(lai(4)), bc.rpc_timeout_s(lai(2000))]
        assert stub.timeouts[1] > stub.timeouts[0]
        bid, refused, applied = outcomes[0]
        assert bid == 2 and refused == {("t", 1): "id", ("t", 3): "id"}
        assert applied == [("t", 0), ("t", 2)]
        assert len(outcomes[1][1]) == 1000

    asyncio.run(scenario())


def _delivered(link: bc.BrokerLink, n: int) -> Callable[[], Awaitable[bool]]:
    async def done() -> bool:
        return link.delivered >= n

    return done
