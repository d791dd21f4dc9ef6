"""ProduceRecords: protobuf records in, one record batch per target partition.

Partitioning (``partition == -1``), the documented default partitioner shared with every
client: a record with a key goes to ``crc32c(key) % partitions`` (CRC-32C/Castagnoli, taken
as an unsigned 32-bit integer); records with a null key are spread round-robin, one counter
per topic on this broker. ``partition >= 0`` sends every record there.

Each partition's records are encoded once (``encode_batch``, with the requested compression)
and appended through the same path as Produce (validation included, so max.message.bytes
applies). A record timestamp of 0 means "now" on the broker's clock.

Idempotence: a request with ``producer_id`` set (>= 0) names one partition and its batch is
built with the request's producer id, epoch and base sequence, so the partition's producer
state checks it exactly as it checks a Produce batch (duplicates answered with the original
offset, gaps ``OUT_OF_ORDER_SEQUENCE_NUMBER``, ...; see :mod:`services.broker.handlers.produce`).
Inconsistent idempotence fields are ``INVALID_REQUEST`` before anything is appended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple

import crc32c

from headwater.batch import Compression, encode_batch, now_ms
from headwater.errors import InvalidRequestError, UnknownTopicOrPartitionError, message_of
from headwater.v1 import broker_pb2
from services.broker.codes import error_code
from services.broker.handlers.produce import append_to_partition, check_acks, timeout_ms_of
from services.broker.replica_manager import ReplicaManager

#: Encode in a worker thread above this many records.
_INLINE_ENCODE_RECORDS = 2000
#: Producer epochs are int16 in the batch header.
_MAX_PRODUCER_EPOCH = (1 << 15) - 1


class Producer(NamedTuple):
    """The batch header's producer fields; ``NONE`` for a non-idempotent request."""

    producer_id: int
    producer_epoch: int
    base_sequence: int


NONE = Producer(-1, -1, -1)


def producer_of(req: broker_pb2.ProduceRecordsRequest) -> Producer:
    """The producer fields a request's batch is built with; raises InvalidRequestError for
    inconsistent ones (see broker.proto ``ProduceRecordsRequest.producer_id``)."""
    pid = req.producer_id if req.HasField("producer_id") else -1
    if pid == -1:
        if req.producer_epoch or req.base_sequence:
            raise InvalidRequestError(
                "producer_epoch and base_sequence need a producer_id (from InitProducerId)"
            )
        return NONE
    if pid < 0:
        raise InvalidRequestError(f"producer_id must be >= 0 (or -1: none), got {pid}")
    if not 0 <= req.producer_epoch <= _MAX_PRODUCER_EPOCH:
        raise InvalidRequestError(
            f"producer_epoch must be 0..{_MAX_PRODUCER_EPOCH}, got {req.producer_epoch}"
        )
    if req.base_sequence < 0:
        raise InvalidRequestError(f"base_sequence must be >= 0, got {req.base_sequence}")
    if req.partition < 0:
        raise InvalidRequestError(
            "an idempotent ProduceRecords names its partition: sequences are per partition"
        )
    return Producer(pid, req.producer_epoch, req.base_sequence)


def default_partition(key: bytes, partitions: int) -> int:
    """The cross-language key partitioner: unsigned CRC-32C of the key bytes, mod partitions."""
    return int(crc32c.crc32c(key)) % partitions


class RoundRobin:
    """Next partition for null-keyed records, per topic (owned by the event loop)."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def take(self, topic: str, partitions: int) -> int:
        n = self._next.get(topic, 0)
        self._next[topic] = n + 1
        return n % partitions


def _encode(
    records: Sequence[broker_pb2.Record], codec: Compression, producer: Producer = NONE
) -> bytes:
    now = now_ms()
    return encode_batch(
        [r.value if r.HasField("value") else None for r in records],
        [r.key if r.HasField("key") else None for r in records],
        headers=[
            [(h.key, h.value if h.HasField("value") else None) for h in r.headers] for r in records
        ],
        timestamps=[r.timestamp or now for r in records],
        compression_type=codec,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=producer.base_sequence,
    )


async def handle(
    rm: ReplicaManager, rr: RoundRobin, req: broker_pb2.ProduceRecordsRequest
) -> broker_pb2.ProduceResponse:
    acks_all = check_acks(req.acks)
    if not req.records:
        raise InvalidRequestError("ProduceRecords carries no records")
    codec = Compression.parse(req.compression or None)
    producer = producer_of(req)
    timeout_ms = timeout_ms_of(req.timeout_ms)
    groups: dict[int, list[broker_pb2.Record]] = {}
    try:
        if req.partition == -1:
            n = rm.metadata.partition_count(req.topic)
            for r in req.records:
                target = default_partition(r.key, n) if r.HasField("key") else rr.take(req.topic, n)
                groups.setdefault(target, []).append(r)
        elif req.partition >= 0:
            groups[req.partition] = list(req.records)
        else:
            raise UnknownTopicOrPartitionError(f"invalid partition {req.partition}")
    except UnknownTopicOrPartitionError as exc:
        return broker_pb2.ProduceResponse(
            partitions=[
                broker_pb2.PartitionProduceResult(
                    topic=req.topic,
                    partition=req.partition,
                    error_code=error_code(exc),
                    error_message=message_of(exc),
                    base_offset=-1,
                    log_append_time=-1,
                    log_start_offset=-1,
                )
            ]
        )

    async def one(
        partition: int, records: list[broker_pb2.Record]
    ) -> broker_pb2.PartitionProduceResult:
        if len(records) > _INLINE_ENCODE_RECORDS:
            buf = await asyncio.to_thread(_encode, records, codec, producer)
        else:
            buf = _encode(records, codec, producer)
        return await append_to_partition(
            rm, req.topic, partition, buf, acks_all=acks_all, timeout_ms=timeout_ms
        )

    results = await asyncio.gather(*(one(p, recs) for p, recs in sorted(groups.items())))
    return broker_pb2.ProduceResponse(partitions=results)
