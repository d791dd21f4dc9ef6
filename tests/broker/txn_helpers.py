"""Raw-gRPC helpers for the idempotence and transaction tests (docs/transactions.md): batches
built by hand with a producer id/epoch/sequence, InitProducerId, WriteTxnMarkers, READ_COMMITTED
fetches and ListOffsets, and reading the broker's Prometheus counters."""

from __future__ import annotations

import urllib.request

from broker_helpers import ActingController

from headwater.batch import encode_batch
from headwater.v1 import broker_pb2, broker_pb2_grpc, transaction_pb2


def idem_batch(
    n: int, pid: int, epoch: int, seq: int, *, txn: bool = False, tag: bytes = b"r"
) -> bytes:
    """One batch of ``n`` records ``tag0..`` from producer ``pid``/``epoch`` at ``seq``."""
    return encode_batch(
        [tag + b"%d" % i for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
    )


def init_pid(stub: broker_pb2_grpc.BrokerStub, transactional_id: str = "") -> tuple[int, int, int]:
    """(error_code, producer_id, producer_epoch) of Broker.InitProducerId."""
    r = stub.InitProducerId(
        transaction_pb2.InitProducerIdRequest(
            transactional_id=transactional_id, producer_id=-1, producer_epoch=-1
        ),
        timeout=30,
    )
    return r.error_code, r.producer_id, r.producer_epoch


def write_markers(
    stub: broker_pb2_grpc.BrokerStub,
    pid: int,
    epoch: int,
    committed: bool,
    partitions: list[tuple[str, int]],
    coordinator_epoch: int = 0,
) -> list[broker_pb2.WriteTxnMarkerResult]:
    resp = stub.WriteTxnMarkers(
        broker_pb2.WriteTxnMarkersRequest(
            markers=[
                broker_pb2.WriteTxnMarker(
                    producer_id=pid,
                    producer_epoch=epoch,
                    committed=committed,
                    coordinator_epoch=coordinator_epoch,
                    partitions=[
                        broker_pb2.TxnMarkerPartition(topic=t, partition=p) for t, p in partitions
                    ],
                )
            ]
        ),
        timeout=60,
    )
    return list(resp.results)


def fetch_request(
    topic: str, offset: int, *, committed: bool, max_wait_ms: int = 100, partition: int = 0
) -> broker_pb2.FetchRequest:
    return broker_pb2.FetchRequest(
        topic=topic,
        partition=partition,
        offset=offset,
        max_wait_ms=max_wait_ms,
        max_bytes=1 << 20,
        min_bytes=1,
        replica_id=-1,
        current_leader_epoch=-1,
        isolation_level=broker_pb2.READ_COMMITTED if committed else broker_pb2.READ_UNCOMMITTED,
    )


def fetch1(
    c: ActingController, topic: str, offset: int, *, committed: bool, partition: int = 0
) -> broker_pb2.FetchResponse:
    """The first answer of a Fetch stream (short long-poll)."""
    req = fetch_request(topic, offset, committed=committed, partition=partition)
    stream = c.stub.Fetch(req, timeout=30)
    try:
        return next(stream)
    finally:
        stream.cancel()


def fetch_records1(
    c: ActingController, topic: str, offset: int, *, committed: bool
) -> broker_pb2.FetchRecordsResponse:
    stream = c.stub.FetchRecords(fetch_request(topic, offset, committed=committed), timeout=30)
    try:
        return next(stream)
    finally:
        stream.cancel()


def latest(c: ActingController, topic: str, *, committed: bool) -> int:
    resp = c.stub.ListOffsets(
        broker_pb2.ListOffsetsRequest(
            partitions=[broker_pb2.ListOffsetsPartition(topic=topic, partition=0, timestamp=-1)],
            isolation_level=broker_pb2.READ_COMMITTED if committed else broker_pb2.READ_UNCOMMITTED,
        ),
        timeout=30,
    )
    (r,) = resp.partitions
    assert r.error_code == 0, r
    return int(r.offset)


def counter(metrics_port: int, name: str, **labels: str) -> float:
    """A counter's value from the broker's /metrics (0 when the series does not exist)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.decode().splitlines():
        if line.startswith(name + "{"):
            series, value = line.rsplit(" ", 1)
            got = ",".join(sorted(series[len(name) + 1 : -1].split(",")))
            if got == want:
                return float(value)
    return 0.0
