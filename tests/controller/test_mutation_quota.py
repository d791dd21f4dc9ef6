"""Controller mutation rate (``controller_mutation_rate``, docs/quotas.md): the token bucket,
and the active controller of a real LocalCluster refusing CreateTopics / CreatePartitions /
DeleteTopics over the rate with THROTTLING_QUOTA_EXCEEDED and nothing written."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from headwater import errors
from headwater.client import AsyncAdminClient, ConfigResource
from headwater.config import validate_quota_configs
from headwater.dev.cluster import LocalCluster
from headwater.v1 import controller_pb2, controller_pb2_grpc
from headwater.v1.errors_pb2 import ErrorCode
from services.controller.mutation_quota import BURST_S, Gate, TokenBucket
from tests.helpers.wait import async_wait_for

RATE = 5.0  # partitions per second; burst = RATE * BURST_S = 55 partitions


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_admits_while_not_negative_then_refuses() -> None:
    b = TokenBucket(RATE, now=0.0)
    assert b.tokens == RATE * BURST_S
    assert b.try_take(50, 0.0) and b.try_take(20, 0.0)  # 55 -> 5 -> -15: overdraw allowed
    assert b.throttle_s(0.0) == pytest.approx(3.0)
    assert not b.try_take(1, 0.0) and b.tokens == pytest.approx(-15)  # refused: nothing taken
    assert not b.try_take(1, 2.9)
    assert b.try_take(1, 3.0)  # back at zero after the throttle time
    assert b.throttle_s(3.0) == pytest.approx(0.2)
    assert b.try_take(0, 1000.0) and b.tokens == RATE * BURST_S  # refills up to the burst only


def test_token_bucket_rate_change_keeps_tokens_capped() -> None:
    b = TokenBucket(10.0, now=0.0)
    b.set_rate(1.0, 0.0)
    assert b.tokens == BURST_S
    with pytest.raises(ValueError):
        TokenBucket(0.0, now=0.0)


def test_gate_raises_typed_error_and_reports_throttle() -> None:
    clock = Clock()
    gate = Gate(TokenBucket(RATE, clock.now), "user 'u' client 'c'", clock)
    gate.admit(60)
    assert gate.throttle_ms() == 1000
    with pytest.raises(errors.ThrottlingQuotaExceededError) as info:
        gate.admit(1)
    assert info.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and not info.value.retriable
    clock.now += 1.0
    gate.admit(1)
    unlimited = Gate(None, "x", clock)
    unlimited.admit(10**6)
    assert unlimited.throttle_ms() == 0


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "x", "2000000"])
def test_controller_mutation_rate_is_validated(bad: str) -> None:
    with pytest.raises(errors.InvalidConfigError):
        validate_quota_configs({"controller_mutation_rate": bad})
    assert validate_quota_configs({"controller_mutation_rate": "2.5"}) == {
        "controller_mutation_rate": "2.5"
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("mutation-quota")
    with LocalCluster(data_dir, brokers=1, controllers=1, etcd_unsafe_no_fsync=True) as c:
        yield c


def _nt(name: str, partitions: int) -> Any:
    return controller_pb2.NewTopic(name=name, partitions=partitions, replication_factor=1)


async def _scenario(c: LocalCluster) -> None:
    admin = AsyncAdminClient(c.bootstrap)
    try:
        await admin.alter_configs(
            ConfigResource("client", "<default>"), {"controller_mutation_rate": str(RATE)}
        )
    finally:
        await admin.close()
    async with grpc.aio.insecure_channel(c.controller_addresses[0]) as ch:
        stub = controller_pb2_grpc.ControllerStub(ch)
        md = (("x-client-id", "mutator"),)
        # 55-token burst: 30 (-> 25), 30 (-> -5) admitted, the third refused, untouched.
        sent = time.monotonic()
        resp = await stub.CreateTopics(
            controller_pb2.CreateTopicsRequest(
                topics=[_nt("mq-a", 30), _nt("mq-b", 30), _nt("mq-c", 30)]
            ),
            metadata=md,
        )
        codes = {t.name: t.error_code for t in resp.topics}
        assert codes == {
            "mq-a": ErrorCode.NONE,
            "mq-b": ErrorCode.NONE,
            "mq-c": ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        }, resp
        assert 0 < resp.throttle_time_ms <= 1000
        # Still negative: growing or deleting a topic is refused too.
        grow = await stub.CreatePartitions(
            controller_pb2.CreatePartitionsRequest(topic="mq-a", total_count=31), metadata=md
        )
        assert grow.result.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert grow.throttle_time_ms > 0
        drop = await stub.DeleteTopics(
            controller_pb2.DeleteTopicsRequest(names=["mq-b"]), metadata=md
        )
        assert drop.topics[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        # validate_only is not counted
        check = await stub.CreateTopics(
            controller_pb2.CreateTopicsRequest(topics=[_nt("mq-v", 5)], validate_only=True),
            metadata=md,
        )
        assert check.topics[0].error_code == ErrorCode.NONE

        # After the throttle time the refused topic is created (NONE, not
        # TOPIC_ALREADY_EXISTS: the refusal had written nothing).
        async def created() -> bool:
            again = await stub.CreateTopics(
                controller_pb2.CreateTopicsRequest(topics=[_nt("mq-c", 30)]), metadata=md
            )
            code = again.topics[0].error_code
            assert code in (ErrorCode.NONE, ErrorCode.THROTTLING_QUOTA_EXCEEDED), again
            return code == ErrorCode.NONE

        await async_wait_for(created, timeout=15, what="mq-c created after the throttle time")
        assert time.monotonic() - sent >= resp.throttle_time_ms / 1000
        # The admin client (client id "": a bucket of its own under clients/<default>)
        # overdraws its bucket, then gets the typed error.
        admin = AsyncAdminClient(c.bootstrap)
        try:
            await admin.create_topic("mq-e", partitions=60)
            with pytest.raises(errors.ThrottlingQuotaExceededError, match="retry in"):
                await admin.create_topic("mq-f", partitions=1)
            # Removing the quota lifts the limit at once (AlterConfigs clears the cache).
            await admin.alter_configs(
                ConfigResource("client", "<default>"), delete=["controller_mutation_rate"]
            )
        finally:
            await admin.close()
        free = await stub.CreateTopics(
            controller_pb2.CreateTopicsRequest(topics=[_nt("mq-d", 100)]), metadata=md
        )
        assert free.topics[0].error_code == ErrorCode.NONE and free.throttle_time_ms == 0
        # The refused growth and deletion had changed nothing: both apply now.
        grow = await stub.CreatePartitions(
            controller_pb2.CreatePartitionsRequest(topic="mq-a", total_count=31), metadata=md
        )
        assert grow.result.error_code == ErrorCode.NONE, grow
        drop = await stub.DeleteTopics(
            controller_pb2.DeleteTopicsRequest(names=["mq-b"]), metadata=md
        )
        assert drop.topics[0].error_code == ErrorCode.NONE, drop


def test_controller_mutation_rate_on_a_cluster(cluster: LocalCluster) -> None:
    asyncio.run(asyncio.wait_for(_scenario(cluster), 120))
