"""The group stream's credit rules and admission, without a cluster (the end-to-end tests are
tests/groups_client/test_group_stream.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from headwater import errors
from headwater.platform.server import start_server
from headwater.v1 import group_stream_pb2 as gs
from headwater.v1 import group_stream_pb2_grpc
from services.broker import group_stream
from services.broker.group_stream import Credit, StreamLimits
from services.broker.metadata_cache import MetadataCache
from tests.helpers.wait import async_wait_for


@pytest.mark.fast
def test_records_credit_counts_down_and_caps() -> None:
    c = Credit(StreamLimits(max_credit_records=10))
    assert not c.open() and c.max_records() == 0  # nothing granted: nothing sent
    c.grant(4, 0)
    assert c.max_records() == 4 and c.allows(1, 10**9)  # bytes never granted: not limited
    for _ in range(4):
        assert c.allows(1, 5)
        c.take(1, 5)
    assert not c.open() and not c.allows(1, 0)
    c.grant(100, 0)
    assert c.records == 10  # capped at --group-stream-max-credit-records


@pytest.mark.fast
def test_bytes_credit_and_one_oversized_record_after_a_grant() -> None:
    c = Credit(StreamLimits(max_credit_bytes=1000))
    c.grant(0, 10)
    assert c.max_records() is None  # records never granted: limited by bytes alone
    assert c.allows(1, 6)
    c.take(1, 6)
    assert not c.allows(1, 6)  # 4 bytes left, something was sent since the grant
    c.grant(0, 1)
    assert c.allows(1, 50)  # nothing sent since this grant: one oversized record goes
    c.take(1, 50)
    assert c.bytes == 0 and not c.open()
    c.grant(0, 10**9)
    assert c.bytes == 1000


@pytest.mark.fast
def test_negative_credit_is_refused_and_changes_nothing() -> None:
    c = Credit(StreamLimits())
    c.grant(3, 30)
    with pytest.raises(errors.InvalidRequestError):
        c.grant(-1, 0)
    with pytest.raises(errors.InvalidRequestError):
        c.grant(1, -1)
    assert (c.records, c.bytes) == (3, 30)


@pytest.mark.fast
@pytest.mark.parametrize(
    "limits",
    [
        StreamLimits(max_streams=0),
        StreamLimits(max_credit_records=0),
        StreamLimits(max_credit_bytes=-1),
        StreamLimits(fetch_buffer_bytes=0),
    ],
)
def test_limits_must_be_positive(limits: StreamLimits) -> None:
    with pytest.raises(errors.InvalidConfigError):
        limits.validate()


def test_streams_beyond_the_broker_limit_are_refused() -> None:
    """With --group-stream-max-streams 1, a second stream is THROTTLING_QUOTA_EXCEEDED while
    the first is held (here: still waiting for its Open); one is admitted again once the first
    ends."""

    async def body() -> None:
        servicer = group_stream.GroupStreamServicer(
            MetadataCache(), lambda: "127.0.0.1:1", None, StreamLimits(max_streams=1)
        )

        def register(server: grpc.aio.Server) -> str:
            group_stream_pb2_grpc.add_GroupStreamServiceServicer_to_server(servicer, server)
            return group_stream.SERVICE_NAME

        running = await start_server(
            host="127.0.0.1", port=0, register=[register], service="broker", metrics_port=None
        )

        async def active(n: int) -> bool:
            return servicer.active == n

        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
                stub = group_stream_pb2_grpc.GroupStreamServiceStub(ch)
                held = stub.Consume(_nothing())
                await async_wait_for(lambda: active(1), timeout=10, what="the first stream held")
                other = stub.Consume(_nothing())
                with pytest.raises(grpc.RpcError) as refused:
                    await other.read()
                err = errors.from_rpc_error(refused.value)
                assert isinstance(err, errors.ThrottlingQuotaExceededError), err
                assert servicer.active == 1
                held.cancel()
                await async_wait_for(lambda: active(0), timeout=10, what="the first stream gone")
                again = stub.Consume()
                await again.write(gs.ConsumeRequest(credit=gs.ConsumeCredit(records=1)))
                with pytest.raises(grpc.RpcError) as bad:
                    await again.read()
                err = errors.from_rpc_error(bad.value)
                assert isinstance(err, errors.InvalidRequestError), err  # admitted, then judged
        finally:
            await running.stop(0)

    asyncio.run(body())


async def _nothing() -> AsyncIterator[gs.ConsumeRequest]:
    """A client that opens the stream and sends nothing (held open until the call ends)."""
    await asyncio.Event().wait()
    yield gs.ConsumeRequest()
