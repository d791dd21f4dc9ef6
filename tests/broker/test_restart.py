"""A broker process restarted on the same data directory keeps its data (of the topics the
cluster still has: others are deleted before it registers); a clean stop revokes its
registration at once; the new incarnation has a new epoch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from broker_helpers import (
    ActingController,
    BrokerProc,
    fetch_once,
    produce,
    read_registration,
    record_topic,
)

from headwater.batch import encode_batch, iter_headers
from headwater.dev.etcd_server import EtcdServer
from headwater.v1.errors_pb2 import ErrorCode


@pytest.fixture
def own_broker(etcd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    base = tmp_path_factory.mktemp("restart")
    proc = BrokerProc(7, base / "data", etcd, base / "broker.log")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_restart_keeps_data(own_broker: BrokerProc, etcd_server: EtcdServer) -> None:
    c = ActingController(own_broker)
    c.create_topic("durable", partitions=2)
    record_topic(own_broker.etcd, "durable", 2, [own_broker.broker_id])
    c.create_topic("forgotten")  # deleted from the cluster while the broker is down: no record
    assert produce(c, "forgotten", 0, encode_batch([b"gone"])).error_code == ErrorCode.NONE
    c.create_topic("renamed")  # kept at start, then re-created before the broker hears of it
    record_topic(own_broker.etcd, "renamed", 1, [own_broker.broker_id])
    assert produce(c, "renamed", 0, encode_batch([b"old"] * 3)).error_code == ErrorCode.NONE
    sent = [
        encode_batch([b"r%d-%d" % (i, j) for j in range(10)], compression_type="lz4")
        for i in range(5)
    ]
    for b in sent:
        assert produce(c, "durable", 1, b).error_code == ErrorCode.NONE
    first_epoch = own_broker.epoch()
    c.close()

    assert own_broker.stop() == 0  # clean exit
    assert read_registration(own_broker.etcd, own_broker.broker_id) is None  # lease revoked
    assert (own_broker.data_dir / "durable-1" / ".clean_shutdown").exists()

    own_broker.start()
    assert own_broker.epoch() > first_epoch
    assert not (own_broker.data_dir / "forgotten-0").exists()
    assert (own_broker.data_dir / "durable-1" / "partition.metadata").exists()
    c = ActingController(own_broker)
    try:
        # before the controller re-asserts leadership the broker serves nothing
        assert fetch_once(c, "durable", 1, 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        c.create_topic("durable", partitions=2)  # the controller re-sends LeaderAndIsr
        got = fetch_once(c, "durable", 1, 0)
        assert got.error_code == ErrorCode.NONE and got.high_watermark == 50
        batches = list(iter_headers(got.records))
        assert [h.base_offset for _, h in batches] == [0, 10, 20, 30, 40]
        for (pos, h), original in zip(batches, sent, strict=True):
            assert got.records[pos + 16 : pos + h.total_size] == original[16:]
        # appends continue from the recovered end
        assert produce(c, "durable", 1, sent[0]).base_offset == 50

        # a LeaderAndIsr carrying another topic id than the stored one: the old log is
        # replaced by an empty one (the name was deleted and created again)
        assert (own_broker.data_dir / "renamed-0").exists()
        c.topic_ids["renamed"] = "id-renamed-2"
        c.create_topic("renamed")
        got = fetch_once(c, "renamed", 0, 0)
        assert got.error_code == ErrorCode.NONE and got.high_watermark == 0 and not got.records
        assert produce(c, "renamed", 0, encode_batch([b"new"])).base_offset == 0
        metadata = (own_broker.data_dir / "renamed-0" / "partition.metadata").read_text()
        assert metadata == "version: 0\ntopic_id: id-renamed-2\n"
    finally:
        c.close()
