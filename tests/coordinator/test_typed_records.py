"""Typed coordinator records: every message encodes to exactly the bytes the JSON-dict version
wrote (so a coordinator reading an old log still loads it), decodes back to itself, and a log
written by that version replays through ``apply`` to the live state. Bad records are refused
with BadRecordError and change nothing; fenced records of every kind are ignored."""

from __future__ import annotations

import pytest

from headwater.v1 import coordinator_pb2 as pb
from headwater.v1 import transaction_pb2 as tpb
from services.coordinator import offsets, txn_offsets
from services.coordinator import records as rec
from services.coordinator.group import GroupTable
from services.coordinator.txn import handlers as h
from services.coordinator.txn.state import TransactionRecord, TxnMetadata, TxnState, TxnTable
from tests.coordinator.harness import Harness

pytestmark = pytest.mark.fast

Log = list[tuple[bytes, bytes | None, int]]


def group_scenario() -> Harness:
    """Every offsets-topic record kind: generations, assignments, commits, pending offsets and
    their marker, a static member, a leave, a delete and retention tombstones."""
    hn = Harness(epoch=3)
    a = hn.join_dynamic("g")
    hn.join("g", a)
    b = hn.join_dynamic("g", client="c2")
    hn.join("g", b, client="c2")
    hn.join("g", a)
    tps = [pb.TopicPartitions(topic="t", partitions=[0, 1])]
    assign = pb.ConsumerAssignment(partitions=tps).SerializeToString()
    hn.sync("g", a, 2, {a: assign, b: b"\x00\xff"})
    hn.sync("g", b, 2)
    hn.commit("g", a, 2, {("t", 0): 10, ("t", 1): 20})
    hn.join("g", instance="static-1", client="s")
    for p, offset, meta in ((0, 5, "m"), (1, 6, "")):
        req = pb.TxnOffsetCommitRequest(
            transactional_id="tx", group_id="g2", producer_id=7, producer_epoch=0,
            generation_id=-1,
            partitions=[pb.OffsetCommitPartition(topic="in", partition=p, offset=offset,
                                                 metadata=meta)],
        )  # fmt: skip
        hn.apply(txn_offsets.txn_commit(hn.table, req, hn.ctx()))
    marker = pb.WriteTxnOffsetMarkerRequest(
        group_id="g2", producer_id=7, producer_epoch=1, committed=True
    )
    hn.apply(txn_offsets.txn_marker(hn.table, marker, hn.ctx()))
    hn.commit("g3", "", -1, {("u", 0): 1})
    s = hn.join_dynamic("solo")
    hn.join("solo", s)
    hn.sync("solo", s, 1, {s: b"x"})
    hn.commit("solo", s, 1, {("t", 3): 4})
    hn.leave("solo", s)
    hn.apply(offsets.delete(hn.table, "solo", hn.ctx())[1])
    hn.now += 10_000_000
    hn.tick()
    hn.apply(offsets.delete(hn.table, "g2", hn.ctx())[1])
    return hn


def txn_scenario() -> tuple[TxnTable, Log]:
    """A transaction from InitProducerId to CompleteCommit, every request through its handler
    found by type."""
    t, log = TxnTable(), []

    def send(request: object, pid: int = -1) -> list[h.MarkerJob]:
        ctx = h.TxnCtx(now_ms=1000, epoch=4, max_timeout_ms=60_000, new_producer_id=pid)
        out, jobs = h.HANDLERS.handle(t, request, ctx)
        for r in out.records:
            log.append((r.key, r.value, r.epoch))
            assert t.apply(r, 5)
        return jobs

    m = rec.marker(4, 2)
    log.append((m.key, m.value, m.epoch))
    t.apply(m, 5)
    send(tpb.InitProducerIdRequest(transactional_id="x", transaction_timeout_ms=9000), 100)
    send(tpb.AddPartitionsToTxnRequest(
        transactional_id="x", producer_id=100, producer_epoch=0,
        partitions=[tpb.TxnTopicPartitions(topic="o", partitions=[0, 2])],
    ))  # fmt: skip
    send(tpb.AddOffsetsToTxnRequest(
        transactional_id="x", producer_id=100, producer_epoch=0, group_id="g"
    ))  # fmt: skip
    end = tpb.EndTxnRequest(transactional_id="x", producer_id=100, producer_epoch=0, committed=True)
    for job in send(end):
        send(job)
    return t, log


def test_records_are_written_byte_for_byte_as_the_json_dict_version_wrote_them() -> None:
    assert group_scenario().log == OLD_GROUP_LOG
    assert txn_scenario()[1] == OLD_TXN_LOG


def test_a_log_in_the_old_format_replays_to_the_live_state() -> None:
    live = group_scenario().table
    old = GroupTable()
    for key, value, epoch in OLD_GROUP_LOG:
        assert old.replay(key, value, epoch, 0)
    assert old.durable_view() == live.durable_view()
    assert old.get("solo") is None and old.get("g2") is None
    assert old.groups["g"].offsets[("t", 0)].offset == 10

    live_txns, _ = txn_scenario()
    old_txns = TxnTable()
    for key, value, epoch in OLD_TXN_LOG:
        assert old_txns.replay(key, value, epoch, 0)
    assert old_txns.txns == live_txns.txns
    assert old_txns.txns["x"].state is TxnState.COMPLETE_COMMIT
    assert (old_txns.marker_epoch, old_txns.marker_owner) == (4, 2)


def test_a_transaction_record_from_before_next_producer_id_loads() -> None:
    value = (
        b'{"groups": ["g"], "last_producer_epoch": 0, "partitions": [["o", 1]], '
        b'"producer_epoch": 1, "producer_id": 9, "start_ms": 5, "state": "PrepareAbort", '
        b'"timeout_ms": 100, "update_ms": 6}'
    )
    t = TxnTable()
    assert t.replay(b"t\x00old", value, 0, 0)
    meta = t.txns["old"]
    assert (meta.next_producer_id, meta.state, meta.partitions) == (
        -1, TxnState.PREPARE_ABORT, frozenset({("o", 1)})
    )  # fmt: skip


OFFSET = rec.Offset(12, 3, "meta\x01é", 99)
MEMBER = rec.MemberValue("m-1", "inst", "client", 100, 200, (("range", b"\x00\xff"),), b"\x01")
MESSAGES: list[rec.Message] = [
    rec.EpochMarker(7, 3),
    rec.GroupMetadata("g", rec.GroupValue(2, "consumer", "range", "m-1", True, (MEMBER,))),
    rec.GroupMetadata("g", rec.GroupValue(0, "", "", "", False, ())),
    rec.GroupMetadata("g", None),
    rec.OffsetCommit("g", "topic.a", 4, OFFSET),
    rec.OffsetCommit("g", "topic.a", 4, None),
    rec.PendingOffsetCommit("g", "t", 0, 123, rec.PendingOffset(OFFSET, 5)),
    rec.PendingOffsetCommit("g", "t", 0, 123, None),
]


@pytest.mark.parametrize("message", MESSAGES, ids=repr)
def test_every_offsets_topic_message_decodes_back_to_itself(message: rec.Message) -> None:
    assert rec.decode(message.key(), message.value()) == message
    assert GroupTable.decode(message.key(), message.value(), 4) == rec.Record(message, 4)


def test_transaction_records_decode_back_to_themselves() -> None:
    meta = TxnMetadata("x", 1, 2, 1, 7, 500, TxnState.ONGOING, frozenset({("t", 0)}),
                       frozenset({"g"}), 10, 11)  # fmt: skip
    for message in (TransactionRecord("x", meta), TransactionRecord("x", None)):
        assert TxnTable.decode(message.key(), message.value(), 2) == rec.Record(message, 2)
    marker = rec.EpochMarker(2, 9)
    assert TxnTable.decode(marker.key(), marker.value(), 2) == rec.Record(marker, 2)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"{}"),
        (b"x", b"{}"),
        (b"z\x00g", b"{}"),  # unknown kind
        (b"o\x00g\x00t", b"{}"),  # offset key without its partition
        (b"o\x00g\x00t\x00zero", None),
        (b"o\x00g\x00t\x000", b"not json"),
        (b"o\x00g\x00t\x000", b"[1, 2]"),
        (b"o\x00g\x00t\x000", b'{"offset": 1}'),
        (b"p\x00g\x00t\x000\x007", b'{"offset": 1, "leader_epoch": 0, "metadata": "", '
                                   b'"commit_timestamp": 0}'),  # no producer_epoch
        (b"g\x00g", b'{"generation": 1}'),
        (b"g\x00g", b'{"generation": 1, "protocol_type": "c", "protocol": "r", "leader": "",'
                    b' "assigned": true, "members": [{"member_id": "m"}]}'),
        (b"e\x005", None),  # a marker is never a tombstone
        (b"e\x005", b'{"epoch": "five", "coordinator_id": 1}'),
    ],
)  # fmt: skip
def test_a_bad_offsets_topic_record_is_refused_and_changes_nothing(
    key: bytes | None, value: bytes | None
) -> None:
    hn = group_scenario()
    before = hn.table.durable_view()
    with pytest.raises(rec.BadRecordError):
        hn.table.replay(key, value, hn.epoch, 0)
    assert hn.table.durable_view() == before and hn.table.marker_epoch == hn.epoch


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"g\x00g", b"{}"),  # an offsets-topic kind
        (b"t\x00x", b'{"producer_id": 1}'),
        (b"t\x00x", b'{"producer_id": 1, "producer_epoch": 0, "last_producer_epoch": -1, '
                    b'"timeout_ms": 1, "state": "Sleeping", "partitions": [], "groups": [], '
                    b'"start_ms": 0, "update_ms": 0}'),
    ],
)  # fmt: skip
def test_a_bad_transaction_record_is_refused_and_changes_nothing(key: bytes, value: bytes) -> None:
    t, _ = txn_scenario()
    before = dict(t.txns)
    with pytest.raises(rec.BadRecordError):
        t.replay(key, value, 4, 0)
    assert t.txns == before


@pytest.mark.parametrize("message", MESSAGES[1:], ids=repr)
def test_apply_ignores_a_record_of_every_kind_below_the_marker_epoch(
    message: rec.Message,
) -> None:
    hn = group_scenario()
    before = hn.table.durable_view()
    assert not hn.table.apply(rec.Record(message, hn.epoch - 1), 0)
    assert hn.table.durable_view() == before
    assert not hn.table.apply(rec.marker(hn.epoch - 1, 9), 0)
    assert (hn.table.marker_epoch, hn.table.marker_owner) == (hn.epoch, 1)


def test_apply_refuses_a_message_of_the_other_topic() -> None:
    meta = TxnMetadata("x", 1, 0)
    with pytest.raises(rec.BadRecordError):
        GroupTable().apply(meta.record(0), 0)
    with pytest.raises(rec.BadRecordError):
        TxnTable().apply(rec.Record(rec.GroupMetadata("g", None), 0), 0)


# Written by the JSON-dict version of the coordinator (commit f30c3cd) for the two scenarios
# above: the on-log format that must keep loading.
OLD_GROUP_LOG: Log = [
    (b"e\x003", b'{"epoch": 3, "coordinator_id": 1}', 3),
    (
        b"g\x00g",
        b'{"assigned": false, "generation": 1, "leader": "c-1", "members": [{"assi'
        b'gnment": "", "client_id": "c", "instance_id": "", "member_id": "c-1", "p'
        b'rotocols": [["range", "CgF0"]], "rebalance_timeout_ms": 30000, "session_'
        b'timeout_ms": 10000}], "protocol": "range", "protocol_type": "consumer"}',
        3,
    ),
    (
        b"g\x00g",
        b'{"assigned": false, "generation": 2, "leader": "c-1", "members": [{"assi'
        b'gnment": "", "client_id": "c", "instance_id": "", "member_id": "c-1", "p'
        b'rotocols": [["range", "CgF0"]], "rebalance_timeout_ms": 30000, "session_'
        b'timeout_ms": 10000}, {"assignment": "", "client_id": "c2", "instance_id"'
        b': "", "member_id": "c2-2", "protocols": [["range", "CgF0"]], "rebalance_'
        b'timeout_ms": 30000, "session_timeout_ms": 10000}], "protocol": "range", '
        b'"protocol_type": "consumer"}',
        3,
    ),
    (
        b"g\x00g",
        b'{"assigned": true, "generation": 2, "leader": "c-1", "members": [{"assig'
        b'nment": "CgcKAXQSAgAB", "client_id": "c", "instance_id": "", "member_id"'
        b': "c-1", "protocols": [["range", "CgF0"]], "rebalance_timeout_ms": 30000'
        b', "session_timeout_ms": 10000}, {"assignment": "AP8=", "client_id": "c2"'
        b', "instance_id": "", "member_id": "c2-2", "protocols": [["range", "CgF0"'
        b']], "rebalance_timeout_ms": 30000, "session_timeout_ms": 10000}], "proto'
        b'col": "range", "protocol_type": "consumer"}',
        3,
    ),
    (
        b"o\x00g\x00t\x000",
        b'{"offset": 10, "leader_epoch": -1, "metadata": "", "commit_timestamp": 1000000}',
        3,
    ),
    (
        b"o\x00g\x00t\x001",
        b'{"offset": 20, "leader_epoch": -1, "metadata": "", "commit_timestamp": 1000000}',
        3,
    ),
    (
        b"p\x00g2\x00in\x000\x007",
        b'{"offset": 5, "leader_epoch": 0, "metadata": "m", "commit_timestamp": 10'
        b'00000, "producer_epoch": 0}',
        3,
    ),
    (
        b"p\x00g2\x00in\x001\x007",
        b'{"offset": 6, "leader_epoch": 0, "metadata": "", "commit_timestamp": 100'
        b'0000, "producer_epoch": 0}',
        3,
    ),
    (
        b"o\x00g2\x00in\x000",
        b'{"offset": 5, "leader_epoch": 0, "metadata": "m", "commit_timestamp": 1000000}',
        3,
    ),
    (b"p\x00g2\x00in\x000\x007", None, 3),
    (
        b"o\x00g2\x00in\x001",
        b'{"offset": 6, "leader_epoch": 0, "metadata": "", "commit_timestamp": 1000000}',
        3,
    ),
    (b"p\x00g2\x00in\x001\x007", None, 3),
    (
        b"o\x00g3\x00u\x000",
        b'{"offset": 1, "leader_epoch": -1, "metadata": "", "commit_timestamp": 1000000}',
        3,
    ),
    (
        b"g\x00solo",
        b'{"assigned": false, "generation": 1, "leader": "c-4", "members": [{"assi'
        b'gnment": "", "client_id": "c", "instance_id": "", "member_id": "c-4", "p'
        b'rotocols": [["range", "CgF0"]], "rebalance_timeout_ms": 30000, "session_'
        b'timeout_ms": 10000}], "protocol": "range", "protocol_type": "consumer"}',
        3,
    ),
    (
        b"g\x00solo",
        b'{"assigned": true, "generation": 1, "leader": "c-4", "members": [{"assig'
        b'nment": "eA==", "client_id": "c", "instance_id": "", "member_id": "c-4",'
        b' "protocols": [["range", "CgF0"]], "rebalance_timeout_ms": 30000, "sessi'
        b'on_timeout_ms": 10000}], "protocol": "range", "protocol_type": "consumer'
        b'"}',
        3,
    ),
    (
        b"o\x00solo\x00t\x003",
        b'{"offset": 4, "leader_epoch": -1, "metadata": "", "commit_timestamp": 1000000}',
        3,
    ),
    (
        b"g\x00solo",
        b'{"assigned": false, "generation": 2, "leader": "", "members": [], "proto'
        b'col": "", "protocol_type": "consumer"}',
        3,
    ),
    (b"o\x00solo\x00t\x003", None, 3),
    (b"g\x00solo", None, 3),
    (
        b"g\x00g",
        b'{"assigned": false, "generation": 3, "leader": "s-3", "members": [{"assi'
        b'gnment": "", "client_id": "s", "instance_id": "static-1", "member_id": "'
        b's-3", "protocols": [["range", "CgF0"]], "rebalance_timeout_ms": 30000, "'
        b'session_timeout_ms": 10000}], "protocol": "range", "protocol_type": "con'
        b'sumer"}',
        3,
    ),
    (
        b"g\x00g",
        b'{"assigned": false, "generation": 3, "leader": "s-3", "members": [{"assi'
        b'gnment": "", "client_id": "s", "instance_id": "static-1", "member_id": "'
        b's-3", "protocols": [["range", "CgF0"]], "rebalance_timeout_ms": 30000, "'
        b'session_timeout_ms": 10000}], "protocol": "range", "protocol_type": "con'
        b'sumer"}',
        3,
    ),
    (b"o\x00g2\x00in\x000", None, 3),
    (b"o\x00g2\x00in\x001", None, 3),
    (b"o\x00g3\x00u\x000", None, 3),
]
OLD_TXN_LOG: Log = [
    (b"e\x004", b'{"epoch": 4, "coordinator_id": 2}', 4),
    (
        b"t\x00x",
        b'{"groups": [], "last_producer_epoch": -1, "next_producer_id": -1, "parti'
        b'tions": [], "producer_epoch": 0, "producer_id": 100, "start_ms": -1, "st'
        b'ate": "Empty", "timeout_ms": 9000, "update_ms": 1000}',
        4,
    ),
    (
        b"t\x00x",
        b'{"groups": [], "last_producer_epoch": -1, "next_producer_id": -1, "parti'
        b'tions": [["o", 0], ["o", 2]], "producer_epoch": 0, "producer_id": 100, "'
        b'start_ms": 1000, "state": "Ongoing", "timeout_ms": 9000, "update_ms": 10'
        b"00}",
        4,
    ),
    (
        b"t\x00x",
        b'{"groups": ["g"], "last_producer_epoch": -1, "next_producer_id": -1, "pa'
        b'rtitions": [["o", 0], ["o", 2]], "producer_epoch": 0, "producer_id": 100'
        b', "start_ms": 1000, "state": "Ongoing", "timeout_ms": 9000, "update_ms":'
        b" 1000}",
        4,
    ),
    (
        b"t\x00x",
        b'{"groups": ["g"], "last_producer_epoch": 0, "next_producer_id": -1, "par'
        b'titions": [["o", 0], ["o", 2]], "producer_epoch": 1, "producer_id": 100,'
        b' "start_ms": 1000, "state": "PrepareCommit", "timeout_ms": 9000, "update'
        b'_ms": 1000}',
        4,
    ),
    (
        b"t\x00x",
        b'{"groups": [], "last_producer_epoch": 0, "next_producer_id": -1, "partit'
        b'ions": [], "producer_epoch": 1, "producer_id": 100, "start_ms": -1, "sta'
        b'te": "CompleteCommit", "timeout_ms": 9000, "update_ms": 1000}',
        4,
    ),
]
