"""The producer's configuration: every option of :class:`headwater.client.producer.AsyncProducer`
checked once, at construction, and kept typed in a :class:`ProducerConfig`.

Configuration (Kafka's names and meanings): ``acks`` 0 | 1 | "all"; ``batch_size`` (bytes,
default :data:`DEFAULT_BATCH_SIZE`, 4 MiB, or ``buffer_memory`` / ``max_request_size`` when
either is smaller — a produce request costs the broker about 0.6 ms of CPU whatever its size,
so batches are big; a batch holds only what was sent, and ``linger_ms`` still sends a
part-filled one. The broker refuses a batch larger than the topic's ``max.message.bytes``
(8 MiB by default) with :class:`MessageTooLargeError` and the producer does not split it; a
topic override below ``batch_size`` bounds that topic's batches
(:meth:`Accumulator.limit_batches`), a lower broker-wide default does not: set ``batch_size``
at or below it);
``linger_ms`` (5); ``buffer_memory`` (32 MiB) with ``max_block_ms`` (60 s) of back-pressure
before :class:`BufferExhaustedError`; ``compression_type`` none | gzip | lz4 | zstd;
``retries``, ``retry_backoff_ms``, ``delivery_timeout_ms`` (120 s); ``max_in_flight`` requests
per broker (5); ``request_timeout_ms`` (30 s); ``max_request_size`` (8 MiB of batches per
request); ``client_id``; ``partitioner`` ("default" = CRC-32C, "murmur2", or a callable);
``address_resolver`` (maps an advertised ``host:port`` to the address to dial: port-forwards,
NAT, fault proxies; the consumer takes it too); ``security`` (a
:class:`headwater.client.security.ClientSecurity`: TLS / mTLS / SCRAM; the consumer and admin
client take it too).

Idempotence (docs/transactions.md): ``acks`` defaults to "all" (Kafka 3.x) and
``enable_idempotence`` (None) is then on: the producer gets a producer id on first use and
numbers batches per partition, so a retry never duplicates or reorders (see
:mod:`headwater.client.sender`). ``enable_idempotence=True`` with ``acks`` other than all or
``retries=0`` is an :class:`InvalidConfigError`; with ``acks`` 0 or 1 batches carry producer
id/epoch/base sequence = -1 (the non-idempotent path). A fatal error (a sequence gap, a fenced
epoch) fails every pending and later send with that error.

A bad option raises :class:`headwater.errors.InvalidConfigError` (acks:
:class:`headwater.errors.InvalidRequiredAcksError`) before anything is started.
"""

from __future__ import annotations

from headwater import errors
from headwater.batch import Compression
from headwater.client import idempotence
from headwater.client import partitioner as partitioners
from headwater.v1 import broker_pb2

#: ``batch_size`` when not given (docs/benchmarks.md, "Session 32": against 1 MiB, +30-77% on
#: the 1 KiB acks=all rows, the same elsewhere).
DEFAULT_BATCH_SIZE = 4 * 1024 * 1024


def parse_acks(acks: int | str) -> int:
    """0, 1, -1 / "all" -> the wire :class:`Acks` value."""
    text = str(acks).strip().lower()
    if text == "0":
        return broker_pb2.ACKS_NONE
    if text == "1":
        return broker_pb2.ACKS_LEADER
    if text in ("all", "-1"):
        return broker_pb2.ACKS_ALL
    raise errors.InvalidRequiredAcksError(f"acks must be 0, 1 or all, got {acks!r}")


class ProducerConfig:
    """The producer's options, validated (in this order) and resolved: ``acks`` as the wire
    value, ``enable_idempotence`` decided, ``partitioner`` an instance, ``compression`` parsed.
    The defaults are :class:`headwater.client.producer.AsyncProducer`'s."""

    def __init__(
        self,
        *,
        acks: int | str,
        batch_size: int | None,
        linger_ms: float,
        buffer_memory: int,
        max_block_ms: float,
        compression_type: str | None,
        retries: int,
        retry_backoff_ms: int,
        delivery_timeout_ms: int,
        max_in_flight: int,
        request_timeout_ms: int,
        max_request_size: int,
        client_id: str,
        partitioner: str | partitioners.Partitioner | None,
        metadata_max_age_ms: int,
        enable_idempotence: bool | None,
        transactional_id: str | None,
        transaction_timeout_ms: int,
    ) -> None:
        if batch_size is None:  # the default, within the buffer and the request given
            batch_size = max(1024, min(DEFAULT_BATCH_SIZE, buffer_memory, max_request_size))
        if batch_size < 1024 or buffer_memory < batch_size or max_in_flight < 1:
            raise errors.InvalidConfigError(
                "need batch_size >= 1024, buffer_memory >= batch_size, max_in_flight >= 1"
            )
        if linger_ms < 0 or retries < 0 or request_timeout_ms <= 0:
            raise errors.InvalidConfigError("linger_ms, retries must be >= 0, timeouts > 0")
        self.acks = parse_acks(acks)
        if transactional_id is not None and not transactional_id:
            raise errors.InvalidConfigError("transactional_id must not be empty")
        if transaction_timeout_ms <= 0:
            raise errors.InvalidConfigError("transaction_timeout_ms must be > 0")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.enable_idempotence = idempotence.resolve_enable_idempotence(
            enable_idempotence,
            self.acks == broker_pb2.ACKS_ALL,
            retries,
            transactional_id is not None,
        )
        if self.enable_idempotence and max_in_flight > idempotence.MAX_IN_FLIGHT_IDEMPOTENT:
            raise errors.InvalidConfigError(
                f"max_in_flight must be <= {idempotence.MAX_IN_FLIGHT_IDEMPOTENT} with idempotence"
            )
        self.partitioner = partitioners.resolve(partitioner)
        self.compression = Compression.parse(compression_type)
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.max_in_flight = max_in_flight
        self.request_timeout_ms = request_timeout_ms
        self.max_request_size = max_request_size
        self.client_id = client_id
        self.metadata_max_age_ms = metadata_max_age_ms
