"""Coordinator requests are dispatched by type: every RPC that reaches a partition runtime has
exactly one registered handler, its in-band NOT_COORDINATOR answer is the RPC's own response
type, internal requests raise PartitionLostError instead, and an unregistered type is refused.
A group runtime over an in-memory log answers a request only once its records were applied."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater.v1 import coordinator_pb2 as pb
from headwater.v1 import transaction_pb2 as tpb
from headwater.v1.errors_pb2 import ErrorCode
from services.coordinator import group_handlers as gh
from services.coordinator import records as rec
from services.coordinator.handlers import PartitionLostError, Registry
from services.coordinator.log_runtime import Request
from services.coordinator.outcome import Outcome
from services.coordinator.runtime import PartitionRuntime
from services.coordinator.txn import handlers as th
from services.coordinator.txn.runtime import not_coordinator as txn_not_coordinator
from tests.helpers.coordinator_log import FakeLog, FakeProducer, OneAtATimeConsumer

pytestmark = pytest.mark.fast

#: RPCs the servicers split into per-group / per-id requests (or answer themselves).
SPLIT = {
    "FindCoordinator": None,
    "DescribeGroups": gh.DescribeGroup,
    "DeleteGroups": gh.DeleteGroup,
}


def _rpc_inputs(module: Any, service: str) -> dict[str, type]:
    methods = module.DESCRIPTOR.services_by_name[service].methods
    return {m.name: getattr(module, m.input_type.name) for m in methods}


def test_every_group_rpc_has_one_handler_registered_by_its_type() -> None:
    for name, request_type in _rpc_inputs(pb, "GroupCoordinator").items():
        routed = SPLIT.get(name, request_type)
        if routed is None:
            continue
        assert routed in gh.HANDLERS.types, name
        answer = gh.not_coordinator(routed("g") if routed in SPLIT.values() else request_type())
        assert answer.error_code == ErrorCode.NOT_COORDINATOR, name


def test_every_transaction_rpc_has_one_handler_registered_by_its_type() -> None:
    for name, request_type in _rpc_inputs(tpb, "TransactionCoordinator").items():
        assert request_type in th.HANDLERS.types, name
    ends = txn_not_coordinator(tpb.EndTxnRequest(transactional_id="x"))
    assert isinstance(ends, tpb.EndTxnResponse)
    assert ends.error_code == ErrorCode.NOT_COORDINATOR
    described = txn_not_coordinator(tpb.DescribeTransactionsRequest(transactional_ids=["a", "b"]))
    assert [(d.transactional_id, d.error_code) for d in described] == [
        ("a", ErrorCode.NOT_COORDINATOR),
        ("b", ErrorCode.NOT_COORDINATOR),
    ]
    invalid = th.HANDLERS.error(tpb.InitProducerIdRequest(), ErrorCode.INVALID_REQUEST, "bad id")
    assert isinstance(invalid, tpb.InitProducerIdResponse)
    assert (invalid.error_code, invalid.error_message) == (ErrorCode.INVALID_REQUEST, "bad id")


@pytest.mark.parametrize(
    "internal",
    [gh.GroupPartitions("g"), gh.TriggerRebalance("g"), gh.SnapshotGroups()],
    ids=repr,
)
def test_an_internal_request_has_no_in_band_answer(internal: object) -> None:
    with pytest.raises(PartitionLostError):
        gh.not_coordinator(internal)


def test_the_answer_keeps_the_request_s_identity() -> None:
    described = gh.not_coordinator(gh.DescribeGroup("orders"))
    assert (described.group_id, described.error_code) == ("orders", ErrorCode.NOT_COORDINATOR)
    deleted = gh.not_coordinator(gh.DeleteGroup("orders"), "gone")
    assert (deleted.group_id, deleted.error_message) == ("orders", "gone")


def test_a_type_without_a_handler_is_refused_and_one_type_has_one_handler() -> None:
    with pytest.raises(TypeError, match="no handler for FindCoordinatorRequest"):
        gh.HANDLERS.route(pb.FindCoordinatorRequest())
    with pytest.raises(ValueError, match="has a handler already"):
        gh.HANDLERS.add(pb.JoinGroupRequest, lambda t, r, c: Outcome())
    registry: Registry[None, None, int] = Registry("test")
    registry.add(int, lambda _t, r, _c: r + 1)
    assert registry.handle(None, 41, None) == 42
    with pytest.raises(TypeError):
        registry.handle(None, True, None)  # a subclass is another type: no implicit routing


def _runtime() -> tuple[PartitionRuntime, FakeLog]:
    log = FakeLog()
    rt = PartitionRuntime(
        partition=0,
        epoch=2,
        coordinator_id=1,
        producer=FakeProducer(log),  # type: ignore[arg-type]
        bootstrap="unused:1",
    )
    rt._consumer = OneAtATimeConsumer(log)  # type: ignore[assignment]
    return rt, log


async def _send(rt: PartitionRuntime, request: object) -> Any:
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    await rt._handle(Request(request, fut))
    return fut.result()


def test_a_commit_is_answered_once_its_record_is_read_back_and_applied() -> None:
    async def main() -> None:
        rt, log = _runtime()
        await rt._commit(Outcome(records=[rec.marker(2, 1)]))
        commit = pb.OffsetCommitRequest(
            group_id="g",
            generation_id=-1,
            partitions=[pb.OffsetCommitPartition(topic="t", partition=0, offset=7)],
        )
        resp = await _send(rt, commit)
        assert resp.partitions[0].error_code == ErrorCode.NONE
        assert [r.key for r in log.records] == [b"e\x002", b"o\x00g\x00t\x000"]
        assert rt._applied == 2 and rt._table.groups["g"].offsets[("t", 0)].offset == 7
        fetched = await _send(rt, pb.OffsetFetchRequest(group_id="g"))
        assert [(o.topic, o.partition, o.offset) for o in fetched.offsets] == [("t", 0, 7)]
        assert await _send(rt, gh.GroupPartitions("g")) == [("t", 0)]
        [snap] = await _send(rt, gh.SnapshotGroups())
        assert (snap.group_id, snap.offsets) == ("g", {("t", 0): 7})

    asyncio.run(main())


def test_a_stopped_runtime_answers_each_request_in_its_own_type() -> None:
    async def main() -> None:
        rt, _ = _runtime()
        rt._shutdown()
        join = await rt.submit(pb.JoinGroupRequest(group_id="g"))
        assert isinstance(join, pb.JoinGroupResponse)
        assert join.error_code == ErrorCode.NOT_COORDINATOR
        listed = await rt.submit(pb.ListGroupsRequest())
        assert isinstance(listed, pb.ListGroupsResponse)
        assert listed.error_code == ErrorCode.NOT_COORDINATOR
        with pytest.raises(PartitionLostError):
            await rt.submit(gh.SnapshotGroups())

    asyncio.run(main())
