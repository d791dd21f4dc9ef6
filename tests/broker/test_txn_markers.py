"""Broker.WriteTxnMarkers through a real broker process (docs/transactions.md, "Control
batches"): commit and abort markers are appended as control batches and answered once
committed, move the producer to the marker's epoch (a produce from the ended transaction's
epoch is fenced), and are checked against producer and coordinator epochs; per-partition
errors as for Produce."""

from __future__ import annotations

from broker_helpers import ActingController, BrokerProc, produce
from txn_helpers import counter, fetch1, idem_batch, init_pid, latest, write_markers

from headwater.batch import decode_batches, iter_headers, parse_control_batch
from headwater.v1 import broker_pb2
from headwater.v1.errors_pb2 import ErrorCode

ALL = broker_pb2.ACKS_ALL


def _pid(c: ActingController) -> int:
    code, pid, epoch = init_pid(c.stub)
    assert code == ErrorCode.NONE and epoch == 0
    return pid


def test_commit_marker_is_a_control_batch_and_bumps_the_epoch(
    controller: ActingController, broker: BrokerProc
) -> None:
    controller.create_topic("mk-commit")
    pid = _pid(controller)
    assert (
        produce(controller, "mk-commit", 0, idem_batch(2, pid, 0, 0, txn=True), ALL).error_code == 0
    )
    (res,) = write_markers(controller.stub, pid, 1, True, [("mk-commit", 0)], coordinator_epoch=3)
    assert res.error_code == ErrorCode.NONE and res.producer_id == pid, res
    assert (res.topic, res.partition) == ("mk-commit", 0)
    assert latest(controller, "mk-commit", committed=False) == 3  # committed: HW past it

    got = fetch1(controller, "mk-commit", 0, committed=False)
    batches = decode_batches(got.records)
    assert [b.header.is_control for b in batches] == [False, True]
    marker = batches[1]
    assert marker.header.base_offset == 2 and marker.header.producer_id == pid
    assert marker.header.producer_epoch == 1 and marker.header.is_transactional
    ctl = parse_control_batch(marker.raw)
    assert ctl.committed and ctl.coordinator_epoch == 3

    # KIP-890: a produce delayed from the ended transaction's epoch is fenced
    late = produce(controller, "mk-commit", 0, idem_batch(1, pid, 0, 2, txn=True))
    assert late.error_code == ErrorCode.INVALID_PRODUCER_EPOCH, late
    # the bumped epoch starts again at sequence 0
    assert produce(controller, "mk-commit", 0, idem_batch(1, pid, 1, 0, txn=True)).base_offset == 3
    assert (
        counter(
            broker.metrics_port,
            "headwater_broker_txn_markers_total",
            topic="mk-commit",
            kind="commit",
        )
        == 1
    )


def test_marker_epoch_checks_and_retries(controller: ActingController) -> None:
    controller.create_topic("mk-checks")
    pid = _pid(controller)
    assert produce(controller, "mk-checks", 0, idem_batch(1, pid, 0, 0, txn=True)).error_code == 0
    (ok,) = write_markers(controller.stub, pid, 1, False, [("mk-checks", 0)], coordinator_epoch=5)
    assert ok.error_code == ErrorCode.NONE, ok
    # a retried marker (no open transaction now) is appended and changes nothing else
    (again,) = write_markers(controller.stub, pid, 1, False, [("mk-checks", 0)], 5)
    assert again.error_code == ErrorCode.NONE, again
    end = latest(controller, "mk-checks", committed=False)
    assert end == 3
    (old,) = write_markers(controller.stub, pid, 0, False, [("mk-checks", 0)], 5)
    assert old.error_code == ErrorCode.INVALID_PRODUCER_EPOCH, old
    (zombie,) = write_markers(controller.stub, pid, 1, True, [("mk-checks", 0)], 4)
    assert zombie.error_code == ErrorCode.TRANSACTION_COORDINATOR_FENCED, zombie
    assert latest(controller, "mk-checks", committed=False) == end  # nothing written
    bad = write_markers(controller.stub, -1, 0, True, [("mk-checks", 0)])
    assert bad[0].error_code == ErrorCode.INVALID_REQUEST


def test_markers_answer_each_partition(controller: ActingController) -> None:
    controller.create_topic("mk-multi", partitions=2)
    me = controller.broker.broker_id
    controller.create_topic("mk-follow", leader=77, replicas=[77, me], isr=[77, me])
    pid = _pid(controller)
    for p in (0, 1):
        r = produce(controller, "mk-multi", p, idem_batch(1, pid, 0, 0, txn=True))
        assert r.error_code == ErrorCode.NONE, r
    results = write_markers(
        controller.stub,
        pid,
        1,
        True,
        [("mk-multi", 0), ("mk-multi", 1), ("mk-nope", 0), ("mk-follow", 0)],
    )
    codes = {(r.topic, r.partition): r.error_code for r in results}
    assert codes == {
        ("mk-multi", 0): ErrorCode.NONE,
        ("mk-multi", 1): ErrorCode.NONE,
        ("mk-nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("mk-follow", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER,
    }
    for p in (0, 1):
        got = fetch1(controller, "mk-multi", 0, committed=False, partition=p)
        assert [h.is_control for _, h in iter_headers(got.records)] == [False, True]
