"""Numbered produce requests (``ProduceRequest.order_*``) are appended in the client's order
even when the broker receives them the other way round; the wait is bounded in time, in
waiting calls and in remembered keys; bad order fields are INVALID_REQUEST and append nothing.

The produce handler and a real partition log (services/broker/request_order.py); the
end-to-end check against a broker process is tests/broker/test_request_order_cluster.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from headwater.batch import encode_batch
from headwater.errors import InvalidRequestError
from headwater.v1 import broker_pb2
from services.broker import request_order as request_order_mod
from services.broker.handlers import produce
from services.broker.partition import Partition
from services.broker.request_order import RequestOrder
from tests.broker.reorder_helpers import reorder_leader
from tests.helpers.wait import async_wait_for

pytestmark = pytest.mark.fast

KEY = 77


class _OnePartition:
    """The one ReplicaManager call the produce handler makes."""

    def __init__(self, p: Partition) -> None:
        self.p = p

    def leader_partition(self, topic: str, partition: int) -> Partition:
        assert (topic, partition) == (self.p.topic, 0)
        return self.p


def _request(
    topic: str, value: bytes, number: int, after: int, key: int = KEY, acks: int = 0
) -> broker_pb2.ProduceRequest:
    return broker_pb2.ProduceRequest(
        acks=acks,  # type: ignore[arg-type]
        partitions=[broker_pb2.PartitionRecords(topic=topic, records=encode_batch([value]))],
        order_key=key,
        order_number=number,
        order_after=after,
    )


async def _produce(rm: Any, order: RequestOrder, req: broker_pb2.ProduceRequest) -> int:
    resp = await produce.handle(rm, req, order)
    (result,) = resp.partitions
    assert result.error_code == 0, result.error_message
    return result.base_offset


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def _true(value: bool) -> bool | None:
    return True if value else None


def test_a_request_received_before_the_one_it_names_is_appended_after_it(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        p = await reorder_leader(tmp_path, "order-ok")
        rm, order = _OnePartition(p), RequestOrder()
        order.wait_s = 60.0  # the test decides when the earlier request arrives
        waits = _sample("headwater_broker_produce_order_waits_total")
        second = asyncio.create_task(_produce(rm, order, _request("order-ok", b"b", 2, 1)))
        await async_wait_for(lambda: _true(order.waiting == 1), timeout=30, what="a wait")
        assert p.log_end_offset == 0 and not second.done()
        assert await _produce(rm, order, _request("order-ok", b"a", 1, 0)) == 0
        assert await asyncio.wait_for(second, 30) == 1
        assert _sample("headwater_broker_produce_order_waits_total") == waits + 1
        # a request whose predecessor has passed, or that names none, does not wait
        assert await _produce(rm, order, _request("order-ok", b"c", 3, 2)) == 2
        assert await _produce(rm, order, _request("order-ok", b"d", 4, 0)) == 3
        # another key is another client: its own order
        assert await _produce(rm, order, _request("order-ok", b"e", 1, 0, key=KEY + 1)) == 4
        assert order.waiting == 0

    asyncio.run(main())


def test_a_failed_entry_lets_the_next_request_go(tmp_path: Path) -> None:
    async def main() -> None:
        p = await reorder_leader(tmp_path, "order-fail")
        rm, order = _OnePartition(p), RequestOrder()
        order.wait_s = 60.0
        second = asyncio.create_task(_produce(rm, order, _request("order-fail", b"b", 2, 1)))
        await async_wait_for(lambda: _true(order.waiting == 1), timeout=30, what="a wait")
        bad = _request("order-fail", b"a", 1, 0)
        bad.partitions[0].records = b"\x00" * 70  # not a batch: CORRUPT_MESSAGE
        resp = await produce.handle(rm, bad, order)
        assert resp.partitions[0].error_code != 0
        assert await asyncio.wait_for(second, 30) == 0

    asyncio.run(main())


def test_a_request_that_fails_at_once_still_holds_back_the_ones_after_it(
    tmp_path: Path,
) -> None:
    # 1 is slow to arrive; 2 (after 1) fails before its turn and is answered at once; 3 (after
    # 1, since 2 is answered) must still wait for 1: 2 passes only once its own wait ends.
    async def main() -> None:
        p = await reorder_leader(tmp_path, "order-early")
        rm, order = _OnePartition(p), RequestOrder()
        order.wait_s = 60.0
        bad = _request("order-early", b"b", 2, 1)
        bad.partitions[0].records = b"\x00" * 70  # CORRUPT_MESSAGE, before its turn
        resp = await asyncio.wait_for(produce.handle(rm, bad, order), 30)
        assert resp.partitions[0].error_code != 0
        third = asyncio.create_task(_produce(rm, order, _request("order-early", b"c", 3, 1)))
        await async_wait_for(
            lambda: _true(order.waiting == 2), timeout=30, what="2's turn and 3 to wait"
        )
        assert p.log_end_offset == 0 and not third.done()
        assert await _produce(rm, order, _request("order-early", b"a", 1, 0)) == 0
        assert await asyncio.wait_for(third, 30) == 1
        await async_wait_for(lambda: _true(order.waiting == 0), timeout=30, what="no waits")

    asyncio.run(main())


def test_a_cancelled_request_passes_when_its_turn_ends(tmp_path: Path) -> None:
    # a call cancelled while it waits (a client deadline) keeps its place: the one after it
    # goes once the earlier one has passed, not at the cancellation
    async def main() -> None:
        p = await reorder_leader(tmp_path, "order-cancel")
        rm, order = _OnePartition(p), RequestOrder()
        order.wait_s = 60.0
        second = asyncio.create_task(_produce(rm, order, _request("order-cancel", b"b", 2, 1)))
        await async_wait_for(lambda: _true(order.waiting == 1), timeout=30, what="2 waits")
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        third = asyncio.create_task(_produce(rm, order, _request("order-cancel", b"c", 3, 2)))
        await async_wait_for(lambda: _true(order.waiting == 2), timeout=30, what="3 waits too")
        assert p.log_end_offset == 0
        assert await _produce(rm, order, _request("order-cancel", b"a", 1, 0)) == 0
        assert await asyncio.wait_for(third, 30) == 1

    asyncio.run(main())


def test_the_wait_is_bounded_and_then_the_request_goes_on(tmp_path: Path) -> None:
    async def main() -> None:
        p = await reorder_leader(tmp_path, "order-bound")
        rm, order = _OnePartition(p), RequestOrder()
        order.wait_s = 0.05  # the earlier request never comes
        timeouts = _sample("headwater_broker_produce_order_wait_timeouts_total")
        assert await _produce(rm, order, _request("order-bound", b"b", 2, 1)) == 0
        assert _sample("headwater_broker_produce_order_wait_timeouts_total") == timeouts + 1
        # and never past the request's own timeout
        order.wait_s = 60.0
        req = _request("order-bound", b"c", 9, 8)
        req.timeout_ms = 50
        assert await asyncio.wait_for(_produce(rm, order, req), 30) == 1

    asyncio.run(main())


def test_waiting_requests_are_bounded_per_key(tmp_path: Path) -> None:
    # A client cannot park more than MAX_WAITING_PER_KEY calls (and their buffers): one more
    # is not held and appends at once; having passed, it releases the ones that waited (a
    # passed number stands for every earlier one: a request passes only after its own wait,
    # so for a client that keeps to its limit the earlier ones have passed or timed out).
    async def main() -> None:
        p = await reorder_leader(tmp_path, "order-cap")
        rm, order = _OnePartition(p), RequestOrder()
        order.wait_s = 60.0
        per_key = request_order_mod.MAX_WAITING_PER_KEY
        held = [
            asyncio.create_task(_produce(rm, order, _request("order-cap", b"h", n, n - 1)))
            for n in range(2, 2 + per_key)
        ]
        await async_wait_for(
            lambda: _true(order.waiting == per_key), timeout=30, what="the key's waits"
        )
        assert p.log_end_offset == 0
        extra = _request("order-cap", b"x", 100, 99)
        assert await asyncio.wait_for(_produce(rm, order, extra), 30) == 0
        offsets = await asyncio.wait_for(asyncio.gather(*held), 30)
        assert sorted(offsets) == list(range(1, 1 + per_key))
        assert order.waiting == 0

    asyncio.run(main())


def test_waiting_requests_are_bounded_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        monkeypatch.setattr(request_order_mod, "MAX_WAITING", 2)
        p = await reorder_leader(tmp_path, "order-all")
        rm, order = _OnePartition(p), RequestOrder()
        order.wait_s = 60.0
        held = [
            asyncio.create_task(_produce(rm, order, _request("order-all", b"h", n, n - 1)))
            for n in (2, 3)
        ]
        await async_wait_for(lambda: _true(order.waiting == 2), timeout=30, what="two waits")
        # another client's request past the broker's limit is not held
        other = _request("order-all", b"o", 5, 4, key=KEY + 1)
        assert await asyncio.wait_for(_produce(rm, order, other), 30) == 0
        assert order.waiting == 2  # and releases nothing of KEY's
        assert await _produce(rm, order, _request("order-all", b"a", 1, 0)) == 1
        assert await asyncio.wait_for(asyncio.gather(*held), 30) == [2, 3]

    asyncio.run(main())


def test_keys_are_bounded_least_recently_used_first_never_one_with_a_waiter() -> None:
    async def main() -> None:
        order = RequestOrder(max_keys=2)
        order.wait_s = 60.0
        waiter = asyncio.create_task(order.wait_turn(1, 5, 60))
        await async_wait_for(lambda: _true(order.waiting == 1), timeout=30, what="a wait")
        order.passed(2, 1)
        order.passed(3, 1)  # key 2 is forgotten, not key 1 (it has a waiter)
        assert len(order) == 2
        await asyncio.wait_for(order.wait_turn(3, 1, 60), 5)  # remembered: no wait
        order.passed(1, 5)
        await asyncio.wait_for(waiter, 5)
        assert order.waiting == 0

    asyncio.run(main())


@pytest.mark.parametrize(
    ("key", "number", "after"),
    [(0, 1, 0), (0, 0, 3), (KEY, 0, 0), (KEY, 3, 3), (KEY, 3, 5)],
)
def test_bad_order_fields_are_invalid_request_and_append_nothing(
    tmp_path: Path, key: int, number: int, after: int
) -> None:
    async def main() -> None:
        p = await reorder_leader(tmp_path, "order-bad")
        with pytest.raises(InvalidRequestError):
            await produce.handle(
                _OnePartition(p), _request("order-bad", b"v", number, after, key), RequestOrder()
            )
        assert p.log_end_offset == 0

    asyncio.run(main())
