"""Request limits (headwater/platform/limits.py): the shape checker on messages, and the interceptor
on an in-process server (start_server with small servicers): undecodable bytes, oversized
requests and over-long fields are refused with INVALID_ARGUMENT / INVALID_REQUEST naming the
method, field and limit, never echoing the input; valid requests reach the handler; client
streams are checked per message; the server's receive limit fits its methods."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
import pytest

from headwater import errors
from headwater.platform import limits as L
from headwater.platform.server import start_server
from headwater.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    coordinator_pb2,
    coordinator_pb2_grpc,
    transaction_pb2,
)
from headwater.v1.errors_pb2 import ErrorCode as E
from services.broker.handlers.produce_wire import decode_produce_request

SMALL = L.Limits(max_request_bytes=64 * 1024, max_entries=100, max_total_entries=250)


def _check(msg: Any, limits: L.Limits = SMALL) -> None:
    L.check_shape(msg, msg.DESCRIPTOR, limits, "Test.Method")


def _refusal(msg: Any, limits: L.Limits = SMALL) -> str:
    with pytest.raises(errors.InvalidRequestError) as info:
        _check(msg, limits)
    return info.value.message


# ------------------------------------------------------------------------- the shape checker


def test_within_limits_passes() -> None:
    req = coordinator_pb2.OffsetFetchRequest(
        group_id="g",
        partitions=[coordinator_pb2.TopicPartitions(topic="t", partitions=range(100))],
    )
    _check(req)


def test_packed_repeated_over_the_limit_names_field_and_limit() -> None:
    req = coordinator_pb2.OffsetFetchRequest(
        group_id="g",
        partitions=[coordinator_pb2.TopicPartitions(topic="t", partitions=range(101))],
    )
    text = _refusal(req)
    assert "OffsetFetchRequest.partitions[0].partitions" in text
    assert "101 entries" in text and "limit is 100" in text


def test_total_entries_bound_the_whole_request() -> None:
    parts = [coordinator_pb2.TopicPartitions(topic="t", partitions=range(60)) for _ in range(5)]
    text = _refusal(coordinator_pb2.OffsetFetchRequest(group_id="g", partitions=parts))
    assert "over 250 entries in all" in text


def test_string_length_and_topic_names() -> None:
    long_group = "g" * (SMALL.max_string_chars + 1)
    text = _refusal(coordinator_pb2.OffsetFetchRequest(group_id=long_group))
    assert "OffsetFetchRequest.group_id" in text and f"limit is {SMALL.max_string_chars}" in text
    assert long_group not in text  # never echoes the input
    # topic names: Kafka's 249 characters
    _check(
        broker_pb2.ListOffsetsRequest(partitions=[broker_pb2.ListOffsetsPartition(topic="t" * 249)])
    )
    bad = broker_pb2.ListOffsetsRequest(
        partitions=[broker_pb2.ListOffsetsPartition(topic="t" * 250)]
    )
    assert "partitions[0].topic is 250 characters long; the limit is 249" in _refusal(bad)


def test_map_fields_count_and_check_their_strings() -> None:
    from headwater.v1 import controller_pb2

    ok = controller_pb2.NewTopic(name="x", configs={f"k{i}": "v" for i in range(10)})
    _check(controller_pb2.CreateTopicsRequest(topics=[ok]))
    many = controller_pb2.NewTopic(name="x", configs={f"k{i}": "v" for i in range(101)})
    assert "topics[0].configs has 101 entries" in _refusal(
        controller_pb2.CreateTopicsRequest(topics=[many])
    )
    long_value = controller_pb2.NewTopic(name="x", configs={"k": "v" * 40_000})
    assert "configs[value] is 40000 characters long" in _refusal(
        controller_pb2.CreateTopicsRequest(topics=[long_value])
    )


def test_hand_parsed_produce_view_is_checked_like_the_message() -> None:
    parts = [broker_pb2.PartitionRecords(topic="t", partition=i, records=b"x") for i in range(101)]
    raw = broker_pb2.ProduceRequest(acks=broker_pb2.ACKS_ALL, partitions=parts).SerializeToString()
    view = decode_produce_request(raw)
    with pytest.raises(errors.InvalidRequestError, match=r"ProduceRequest.partitions has 101"):
        L.check_shape(view, broker_pb2.ProduceRequest.DESCRIPTOR, SMALL, "Broker.Produce")
    long_topic = broker_pb2.ProduceRequest(
        partitions=[broker_pb2.PartitionRecords(topic="t" * 300)]
    )
    view = decode_produce_request(long_topic.SerializeToString())
    with pytest.raises(errors.InvalidRequestError, match=r"partitions\[0\].topic is 300"):
        L.check_shape(view, broker_pb2.ProduceRequest.DESCRIPTOR, SMALL, "Broker.Produce")


def test_produce_parser_stops_at_the_partition_limit() -> None:
    parts = [broker_pb2.PartitionRecords(topic="t", partition=i) for i in range(11)]
    raw = broker_pb2.ProduceRequest(partitions=parts).SerializeToString()
    assert len(decode_produce_request(raw, max_partitions=11).partitions) == 11
    with pytest.raises(errors.InvalidRequestError, match=r"more than 10 entries; the limit is 10"):
        decode_produce_request(raw, max_partitions=10)


def test_method_classes_and_receive_limit() -> None:
    rl = L.RequestLimits()
    assert rl.for_method("/headwater.v1.Broker/Produce") is rl.bulk
    assert rl.for_method("/headwater.v1.Broker/LeaderAndIsr") is rl.control
    assert rl.for_method("/headwater.v1.GroupCoordinator/OffsetFetch") is rl.default
    coordinator = [
        "/headwater.v1.GroupCoordinator/OffsetFetch",
        "/headwater.v1.GroupCoordinator/JoinGroup",
    ]
    assert rl.largest_request_bytes(coordinator) == rl.default.max_request_bytes
    broker = [*coordinator, "/headwater.v1.Broker/Produce"]
    assert rl.largest_request_bytes(broker) == rl.bulk.max_request_bytes


def test_flags_build_limits_and_refuse_nonsense() -> None:
    ap = argparse.ArgumentParser()
    L.add_limit_flags(ap)
    got = L.limits_from_args(ap.parse_args(["--max-request-entries", "7"]), ap)
    assert got.default.max_entries == 7
    assert got.default.max_request_bytes == L.DEFAULT_LIMITS.default.max_request_bytes
    with pytest.raises(SystemExit):
        L.limits_from_args(ap.parse_args(["--max-request-bytes", "0"]), ap)


# ------------------------------------------------------------------------- the interceptor


class _Groups(coordinator_pb2_grpc.GroupCoordinatorServicer):
    def __init__(self) -> None:
        self.calls = 0

    async def OffsetFetch(
        self, request: coordinator_pb2.OffsetFetchRequest, context: Any
    ) -> coordinator_pb2.OffsetFetchResponse:
        self.calls += 1
        return coordinator_pb2.OffsetFetchResponse()


class _Replicas(broker_pb2_grpc.BrokerServicer):
    """ReplicaFetch answers one response per request message. A stream whose first message
    has replica_id 7 lets every error through; any other catches everything but its own typed
    error (so the interceptor's refusal must survive a handler that swallows errors)."""

    async def ReplicaFetch(
        self, request_iterator: AsyncIterator[broker_pb2.ReplicaFetchRequest], context: Any
    ) -> AsyncIterator[broker_pb2.ReplicaFetchResponse]:
        propagate = False
        try:
            async for req in request_iterator:
                propagate = propagate or req.replica_id == 7
                if req.replica_id == 99:  # a typed failure of the handler itself
                    raise errors.StaleBrokerEpochError("broker epoch 1 is stale")
                yield broker_pb2.ReplicaFetchResponse()
        except errors.StaleBrokerEpochError:
            raise
        except Exception:
            if propagate:
                raise
            return


def _registrar(servicer: Any, add: Callable[[Any, Any], None], name: str) -> Any:
    def register(server: Any) -> str:
        add(servicer, server)
        return name

    return register


@pytest.fixture()
def server() -> Iterator[tuple[str, _Groups, asyncio.AbstractEventLoop]]:
    loop = asyncio.new_event_loop()
    groups = _Groups()
    limits = L.RequestLimits(default=SMALL, control=SMALL)
    running = loop.run_until_complete(
        start_server(
            host="127.0.0.1",
            port=0,
            register=[
                _registrar(
                    groups,
                    coordinator_pb2_grpc.add_GroupCoordinatorServicer_to_server,
                    "headwater.v1.GroupCoordinator",
                ),
                _registrar(
                    _Replicas(), broker_pb2_grpc.add_BrokerServicer_to_server, "headwater.v1.Broker"
                ),
            ],
            service="test",
            metrics_port=None,
            limits=limits,
        )
    )
    try:
        yield f"127.0.0.1:{running.port}", groups, loop
    finally:
        loop.run_until_complete(running.stop(0))
        loop.close()


def _call(loop: asyncio.AbstractEventLoop, address: str, method: str, payload: bytes) -> Any:
    async def go() -> Any:
        async with grpc.aio.insecure_channel(address) as ch:
            fn = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
            return await fn(payload, timeout=10)

    return loop.run_until_complete(go())


def _status(
    loop: asyncio.AbstractEventLoop, address: str, method: str, payload: bytes
) -> tuple[grpc.StatusCode, int, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        _call(loop, address, method, payload)
    err = info.value
    trailer = dict(err.trailing_metadata() or ()).get(errors.ERROR_CODE_METADATA_KEY)
    return err.code(), int(trailer) if trailer is not None else -1, err.details() or ""


OFFSET_FETCH = "/headwater.v1.GroupCoordinator/OffsetFetch"


def test_undecodable_bytes_are_invalid_request_without_echo(server: Any) -> None:
    address, groups, loop = server
    garbage = b"\x0a\xff\xff\xff\xff\x0f" + b"ECHO-ME" * 10
    code, trailer, details = _status(loop, address, OFFSET_FETCH, garbage)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and trailer == E.INVALID_REQUEST
    assert "GroupCoordinator.OffsetFetch" in details and "ECHO-ME" not in details
    assert groups.calls == 0


def test_oversized_and_overlong_requests_never_reach_the_handler(server: Any) -> None:
    address, groups, loop = server
    big = coordinator_pb2.OffsetFetchRequest(
        partitions=[coordinator_pb2.TopicPartitions(topic="t", partitions=range(1_000_000))]
    ).SerializeToString()
    code, trailer, details = _status(loop, address, OFFSET_FETCH, big)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and trailer == E.INVALID_REQUEST
    assert f"limit is {SMALL.max_request_bytes}" in details
    many = coordinator_pb2.OffsetFetchRequest(
        partitions=[coordinator_pb2.TopicPartitions(topic="t", partitions=range(5000))]
    ).SerializeToString()
    code, trailer, details = _status(loop, address, OFFSET_FETCH, many)
    assert trailer == E.INVALID_REQUEST and "partitions[0].partitions has 5000 entries" in details
    assert groups.calls == 0
    ok = coordinator_pb2.OffsetFetchRequest(group_id="g").SerializeToString()
    assert (
        coordinator_pb2.OffsetFetchResponse.FromString(_call(loop, address, OFFSET_FETCH, ok))
        is not None
    )
    assert groups.calls == 1


@pytest.mark.parametrize("handler", ["swallows errors", "lets errors through"])
def test_client_stream_messages_are_each_checked(
    server: Any, handler: str, caplog: pytest.LogCaptureFixture
) -> None:
    address, _groups, loop = server
    replica = 7 if handler == "lets errors through" else 1
    good = broker_pb2.ReplicaFetchRequest(replica_id=replica).SerializeToString()

    async def go(second: bytes) -> tuple[int, grpc.aio.AioRpcError | None]:
        async with grpc.aio.insecure_channel(address) as ch:
            fn = ch.stream_stream(
                "/headwater.v1.Broker/ReplicaFetch",
                request_serializer=None,
                response_deserializer=None,
            )

            async def requests() -> AsyncIterator[bytes]:
                yield good
                yield second

            got = 0
            try:
                async for _resp in fn(requests(), timeout=10):
                    got += 1
            except grpc.aio.AioRpcError as err:
                return got, err
            return got, None

    got, err = loop.run_until_complete(go(good))
    assert got == 2 and err is None
    # a HeadwaterError raised by a bidirectional-streaming handler gets its status and trailer
    got, err = loop.run_until_complete(
        go(broker_pb2.ReplicaFetchRequest(replica_id=99).SerializeToString())
    )
    assert got == 1 and err is not None and err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert dict(err.trailing_metadata() or ())[errors.ERROR_CODE_METADATA_KEY] == str(
        E.STALE_BROKER_EPOCH
    )
    got, err = loop.run_until_complete(go(os.urandom(3) + b"\xff\xff\xff\xff\xff"))
    assert got == 1 and err is not None
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    trailer = dict(err.trailing_metadata() or ())[errors.ERROR_CODE_METADATA_KEY]
    assert int(trailer) == E.INVALID_REQUEST
    assert "Broker.ReplicaFetch" in (err.details() or "")
    # answered once: no second abort (grpc logs "Abort already called" as an error)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


def test_add_partitions_to_txn_shape() -> None:
    # AddPartitionsToTxn: the reproduction shape (an unknown transactional id does not
    # matter: the shape check runs before the handler)
    req = transaction_pb2.AddPartitionsToTxnRequest(
        transactional_id="nope",
        partitions=[transaction_pb2.TxnTopicPartitions(topic="t", partitions=range(101))],
    )
    assert "AddPartitionsToTxnRequest.partitions[0].partitions has 101" in _refusal(req)


def test_client_controlled_waits_are_clamped() -> None:
    from services.broker.handlers import produce

    assert produce.timeout_ms_of(0) == produce.DEFAULT_TIMEOUT_MS
    with pytest.raises(errors.InvalidRequestError):
        produce.timeout_ms_of(-5)
    assert produce.timeout_ms_of(1234) == 1234
    assert produce.timeout_ms_of(2**31 - 1) == produce.MAX_TIMEOUT_MS


def test_reassignment_reasons_do_not_echo_long_lists() -> None:
    from services.controller.reassignment import check_target

    reason = check_target(list(range(10_000)) * 2, registered={1, 2, 3})
    assert reason is not None and "20000 brokers has duplicates" in reason and len(reason) < 120
    reason = check_target(list(range(5, 10_005)), registered={1, 2, 3})
    assert reason is not None and "10000 brokers are not registered" in reason
    assert len(reason) < 120
    assert check_target([1, 2], registered={1, 2, 3}) is None


def test_paced_gives_the_loop_a_turn_every_n_items() -> None:
    async def go() -> tuple[list[int], list[int]]:
        ticks: list[int] = []
        seen: list[int] = []

        async def ticker() -> None:
            while True:
                ticks.append(len(seen))
                await asyncio.sleep(0)

        task = asyncio.get_running_loop().create_task(ticker())
        await asyncio.sleep(0)  # the ticker runs once before the loop below
        async for i in L.paced(range(3000), every=1000):
            seen.append(i)
        task.cancel()
        return seen, ticks

    seen, ticks = asyncio.run(go())
    assert seen == list(range(3000))
    # the ticker ran at the start and after items 1000 and 2000, never in between
    assert ticks == [0, 1000, 2000]
