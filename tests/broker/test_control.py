"""Controller -> broker RPCs against a real broker: fencing, leadership, StopReplica, and what
fetch streams and producers see when leadership changes."""

from __future__ import annotations

import threading

from broker_helpers import ActingController, fetch_once, list_offset, produce

from headwater.batch import encode_batch
from headwater.v1 import broker_pb2, metadata_pb2
from headwater.v1.errors_pb2 import ErrorCode


def _state(
    me: int, *, leader: int, epoch: int, replicas: list[int], isr: list[int]
) -> metadata_pb2.PartitionState:
    return metadata_pb2.PartitionState(
        partition=0,
        leader=leader,
        leader_epoch=epoch,
        replicas=replicas,
        isr=isr,
        partition_epoch=epoch,
    )


def test_registration_in_etcd(controller: ActingController) -> None:
    from broker_helpers import read_registration

    b = controller.broker
    reg = read_registration(b.etcd, b.broker_id)
    assert reg is not None
    value, epoch = reg
    assert value["broker_id"] == b.broker_id and value["port"] == b.port
    assert value["host"] == "127.0.0.1" and value["rack"] == ""
    assert value["metrics_url"] == f"http://127.0.0.1:{b.metrics_port}/metrics"
    assert epoch > 0


def test_stale_broker_epoch_is_rejected(controller: ActingController) -> None:
    me = controller.broker.broker_id
    stale = controller.broker.epoch() - 1
    st = [_state(me, leader=me, epoch=0, replicas=[me], isr=[me])]
    resp = controller.leader_and_isr("fenced-b", st, broker_epoch=stale)
    assert resp.error_code == ErrorCode.STALE_BROKER_EPOCH and not resp.partitions
    assert controller.update_metadata(broker_epoch=0).error_code == ErrorCode.STALE_BROKER_EPOCH
    stop = controller.stub.StopReplica(
        broker_pb2.StopReplicaRequest(
            controller_epoch=controller.controller_epoch, broker_epoch=-1
        ),
        timeout=30,
    )
    assert stop.error_code == ErrorCode.STALE_BROKER_EPOCH
    # nothing was created
    assert (
        list_offset(controller, "fenced-b", 0, -1).error_code
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )


def test_request_for_a_newer_broker_epoch_is_retriable(controller: ActingController) -> None:
    """The controller can see a registration before the broker's own put returns: a request
    for an epoch newer than the broker knows is answered with a retriable code, not STALE."""
    me = controller.broker.broker_id
    newer = controller.broker.epoch() + 1
    st = [_state(me, leader=me, epoch=0, replicas=[me], isr=[me])]
    resp = controller.leader_and_isr("early-b", st, broker_epoch=newer)
    assert resp.error_code == ErrorCode.BROKER_NOT_AVAILABLE and not resp.partitions
    assert (
        controller.update_metadata(broker_epoch=newer).error_code == ErrorCode.BROKER_NOT_AVAILABLE
    )
    assert (
        list_offset(controller, "early-b", 0, -1).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )


def test_stale_controller_epoch_is_rejected(controller: ActingController) -> None:
    me = controller.broker.broker_id
    controller.controller_epoch += 5  # a newer controller takes over
    controller.create_topic("fenced-c")
    old = controller.controller_epoch - 1
    st = [_state(me, leader=-1, epoch=9, replicas=[me], isr=[me])]
    resp = controller.leader_and_isr("fenced-c", st, controller_epoch=old)
    assert resp.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert (
        controller.update_metadata(controller_epoch=old).error_code
        == ErrorCode.STALE_CONTROLLER_EPOCH
    )
    stop = controller.stub.StopReplica(
        broker_pb2.StopReplicaRequest(
            controller_epoch=old,
            broker_epoch=controller.broker.epoch(),
            partitions=[
                broker_pb2.StopReplicaPartition(topic="fenced-c", partition=0, delete=True)
            ],
        ),
        timeout=30,
    )
    assert stop.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    # the deposed controller changed nothing: still leader, still writable
    assert produce(controller, "fenced-c", 0, encode_batch([b"ok"])).error_code == ErrorCode.NONE


def test_follower_refuses_produce_and_fetch(controller: ActingController) -> None:
    me = controller.broker.broker_id
    controller.create_topic("follow", leader=77, replicas=[77, me], isr=[77, me])
    r = produce(controller, "follow", 0, encode_batch([b"x"]))
    assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch_once(controller, "follow", 0, 0).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert list_offset(controller, "follow", 0, -1).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_min_insync_replicas_with_acks_all(controller: ActingController) -> None:
    controller.create_topic("minisr", configs={"min.insync.replicas": "2"})
    before = list_offset(controller, "minisr", 0, -1).offset
    r = produce(controller, "minisr", 0, encode_batch([b"x"]), acks=broker_pb2.ACKS_ALL)
    assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert list_offset(controller, "minisr", 0, -1).offset == before
    # acks=1 is not subject to min.insync.replicas
    assert produce(controller, "minisr", 0, encode_batch([b"x"])).error_code == ErrorCode.NONE


def test_leader_epoch_fencing_and_leadership_moves(controller: ActingController) -> None:
    me = controller.broker.broker_id
    controller.create_topic("epochs", leader_epoch=4)
    produce(controller, "epochs", 0, encode_batch([b"a"]))
    assert (
        fetch_once(controller, "epochs", 0, 0, current_leader_epoch=4).error_code == ErrorCode.NONE
    )
    assert (
        fetch_once(controller, "epochs", 0, 0, current_leader_epoch=3).error_code
        == ErrorCode.FENCED_LEADER_EPOCH
    )
    assert (
        fetch_once(controller, "epochs", 0, 0, current_leader_epoch=5).error_code
        == ErrorCode.UNKNOWN_LEADER_EPOCH
    )
    # an older leader epoch for the partition is refused per partition
    resp = controller.leader_and_isr(
        "epochs", [_state(me, leader=me, epoch=3, replicas=[me], isr=[me])]
    )
    assert [p.error_code for p in resp.partitions] == [ErrorCode.STALE_CONTROLLER_EPOCH]

    # an open long-poll stream ends with NOT_LEADER_OR_FOLLOWER when leadership moves away
    req = broker_pb2.FetchRequest(
        topic="epochs",
        partition=0,
        offset=1,
        max_wait_ms=30_000,
        max_bytes=1 << 20,
        current_leader_epoch=-1,
    )
    stream = controller.stub.Fetch(req, timeout=60)
    got: list[broker_pb2.FetchResponse] = []
    reader = threading.Thread(target=lambda: got.extend(stream))
    reader.start()
    resp = controller.leader_and_isr(
        "epochs", [_state(me, leader=42, epoch=5, replicas=[42, me], isr=[42, me])]
    )
    assert [p.error_code for p in resp.partitions] == [ErrorCode.NONE]
    reader.join(15)
    assert not reader.is_alive(), "stream did not end after losing leadership"
    assert [r.error_code for r in got] == [ErrorCode.NOT_LEADER_OR_FOLLOWER]


def test_stop_replica_delete(controller: ActingController) -> None:
    controller.create_topic("doomed")
    produce(controller, "doomed", 0, encode_batch([b"bye"]))
    req = broker_pb2.FetchRequest(
        topic="doomed",
        partition=0,
        offset=1,
        max_wait_ms=30_000,
        max_bytes=1 << 20,
        current_leader_epoch=-1,
    )
    stream = controller.stub.Fetch(req, timeout=60)
    got: list[broker_pb2.FetchResponse] = []
    reader = threading.Thread(target=lambda: got.extend(stream))
    reader.start()
    # as on topic deletion: metadata without the topic first, then StopReplica with delete
    del controller.topics["doomed"]
    assert controller.update_metadata().error_code == ErrorCode.NONE
    resp = controller.stub.StopReplica(
        broker_pb2.StopReplicaRequest(
            controller_id=1000,
            controller_epoch=controller.controller_epoch,
            broker_epoch=controller.broker.epoch(),
            partitions=[broker_pb2.StopReplicaPartition(topic="doomed", partition=0, delete=True)],
        ),
        timeout=30,
    )
    assert resp.error_code == ErrorCode.NONE
    assert [p.error_code for p in resp.partitions] == [ErrorCode.NONE]
    reader.join(15)
    assert not reader.is_alive()
    assert [r.error_code for r in got] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert not (controller.broker.data_dir / "doomed-0").exists()
    r = produce(controller, "doomed", 0, encode_batch([b"again"]))
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_naming_another_topic_id_drops_the_hosted_log(
    controller: ActingController,
) -> None:
    # The topic was deleted and created again (placed elsewhere) while this broker missed the
    # StopReplica: the next metadata snapshot names the new id, and the old log goes.
    me = controller.broker.broker_id
    controller.create_topic("replaced")
    assert produce(controller, "replaced", 0, encode_batch([b"old"])).error_code == 0
    controller.topic_ids["replaced"] = "id-replaced-2"
    elsewhere = _state(me, leader=42, epoch=0, replicas=[42, 43], isr=[42, 43])
    controller.topics["replaced"] = metadata_pb2.TopicMetadata(
        name="replaced", topic_id="id-replaced-2", partitions=[elsewhere]
    )
    assert controller.update_metadata().error_code == ErrorCode.NONE
    assert not (controller.broker.data_dir / "replaced-0").exists()
    r = fetch_once(controller, "replaced", 0, 0)
    assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and not r.records
    # a topic merely absent from a snapshot is not deleted by it
    controller.create_topic("kept")
    del controller.topics["kept"]
    assert controller.update_metadata().error_code == ErrorCode.NONE
    assert (controller.broker.data_dir / "kept-0").exists()
