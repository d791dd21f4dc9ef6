"""Pure checks of the group-consumer configuration and CLI parsing (no cluster)."""

from __future__ import annotations

import asyncio

import pytest

from headwater import errors
from headwater.cli.groups_cmd import parse_datetime
from headwater.client.consumer import AsyncConsumer
from headwater.client.errors import IllegalStateError
from headwater.client.types import TopicPartition

pytestmark = pytest.mark.fast


def test_bad_group_config_is_a_typed_error() -> None:
    with pytest.raises(errors.InvalidGroupIdError):
        AsyncConsumer("127.0.0.1:1", group_id="")
    with pytest.raises(errors.InvalidConfigError):
        AsyncConsumer(
            "127.0.0.1:1", group_id="g", heartbeat_interval_ms=5000, session_timeout_ms=3000
        )
    with pytest.raises(errors.InvalidConfigError):
        AsyncConsumer("127.0.0.1:1", group_id="g", partition_assignment_strategy=["nope"])


def test_subscribe_and_assign_exclude_each_other() -> None:
    async def run() -> None:
        c = AsyncConsumer("127.0.0.1:1", group_id="g")
        try:
            with pytest.raises(IllegalStateError):
                c.subscribe(["a"], pattern="a.*")
            with pytest.raises(IllegalStateError):
                c.subscribe()
            c.subscribe(["a"])
            assert c.subscription() == {"a"} and c.generation == -1
            with pytest.raises(IllegalStateError):
                c.assign([TopicPartition("a", 0)])
        finally:
            await c.close()  # never joined: nothing to commit or leave
        plain = AsyncConsumer("127.0.0.1:1")
        with pytest.raises(errors.InvalidGroupIdError):
            await plain.commit()
        await plain.close()

    asyncio.run(run())


def test_parse_datetime() -> None:
    assert parse_datetime("1700000000000") == 1_700_000_000_000
    assert parse_datetime("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_datetime("2023-11-14T22:13:20") == 1_700_000_000_000
    with pytest.raises(errors.InvalidRequestError):
        parse_datetime("yesterday")
