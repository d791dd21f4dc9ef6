"""The follower's fetch loop and a stream the leader ended: a write to it is a session error
(reconnect with the usual backoff), never taken for a bug. A real grpc.aio server and call."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from headwater.v1 import broker_pb2, broker_pb2_grpc
from services.broker.replication.fetcher import SessionError, write_request


def test_a_write_to_a_stream_the_leader_ended_is_a_session_error() -> None:
    """A follower writing its next request on a stream whose other side has already ended (the
    leader died or closed it) gets a SessionError (reconnect after the usual backoff), not
    grpc.aio's asyncio.InvalidStateError, which the fetch loop took for a bug (logged at
    ERROR with a traceback, then the longest backoff)."""

    class EndsAtOnce(broker_pb2_grpc.BrokerServicer):
        async def ReplicaFetch(self, request_iterator, context):  # type: ignore[no-untyped-def,override]
            return  # ends the stream with OK before reading anything
            yield  # a stream handler

    async def main() -> None:
        server = grpc.aio.server()
        broker_pb2_grpc.add_BrokerServicer_to_server(EndsAtOnce(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = broker_pb2_grpc.BrokerStub(channel).ReplicaFetch()
                assert await asyncio.wait_for(call.read(), 30) is grpc.aio.EOF
                await asyncio.wait_for(call.wait_for_connection(), 30)
                with pytest.raises(SessionError):
                    await write_request(call, broker_pb2.ReplicaFetchRequest(replica_id=2))
        finally:
            await server.stop(None)

    asyncio.run(main())
