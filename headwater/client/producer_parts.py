"""The parts a started producer runs, built and connected in one place.

:func:`build_parts` makes, from a :class:`headwater.client.producer_config.ProducerConfig`: the
connection pool and the metadata view; the record accumulator; the topic -> partitions lookup
and the bulk appender over it; for an idempotent producer the sequencer's
:class:`headwater.client.idempotence.Producing` view, and with a ``transactional_id`` the
:class:`headwater.client.transactions.TransactionManager` (which wakes the sender); and the
:class:`headwater.client.sender.Sender` that drains the accumulator. Nothing here does I/O or
starts a task: :meth:`headwater.client.producer.AsyncProducer.start` runs the sender.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from headwater.client import idempotence, transactions
from headwater.client.accumulator import Accumulator
from headwater.client.bulk import BulkAppender
from headwater.client.connection import ConnectionPool
from headwater.client.metadata import Metadata
from headwater.client.producer_config import ProducerConfig
from headwater.client.security import ClientSecurity
from headwater.client.sender import Sender
from headwater.client.topic_partitions import TopicPartitions
from headwater.client.types import TopicPartition


@dataclass(frozen=True)
class ProducerParts:
    pool: ConnectionPool
    metadata: Metadata
    acc: Accumulator
    topics: TopicPartitions
    bulk: BulkAppender
    txn: transactions.TransactionManager | None
    sender: Sender


def build_parts(
    c: ProducerConfig,
    bootstrap: list[str],
    tps: dict[str, list[TopicPartition]],
    *,
    address_resolver: Callable[[str], str] | None,
    security: ClientSecurity | None,
    seq: idempotence.Sequencer | None,
    on_batch_sealed: Callable[[str, int], None],
    check_open: Callable[[], None],
) -> ProducerParts:
    """The producer's parts (see the module docstring). ``tps`` is the producer's topic ->
    partitions cache (filled by the lookup, read directly by its per-record path); ``seq`` is
    the idempotent producer's sequencer (None: not idempotent)."""
    pool = ConnectionPool(address_resolver=address_resolver, security=security)
    metadata = Metadata(
        pool,
        bootstrap,
        max_age_ms=c.metadata_max_age_ms,
        request_timeout_ms=c.request_timeout_ms,
        retry_backoff_ms=c.retry_backoff_ms,
    )
    acc = Accumulator(
        batch_size=c.batch_size,
        linger_ms=c.linger_ms,
        buffer_memory=c.buffer_memory,
        max_block_ms=c.max_block_ms,
        delivery_timeout_ms=c.delivery_timeout_ms,
        compression=c.compression,
        on_batch_sealed=on_batch_sealed,
    )
    topics = TopicPartitions(tps, metadata, acc, c.max_block_ms)
    bulk = BulkAppender(acc, c.partitioner, c.max_request_size, check_open)
    txn: transactions.TransactionManager | None = None
    producing: idempotence.Producing | None = None
    if seq is not None:
        if c.transactional_id is not None:
            txn = transactions.TransactionManager(
                c.transactional_id,
                c.transaction_timeout_ms,
                seq,
                acc,
                pool,
                metadata,
                request_timeout_s=c.request_timeout_ms / 1000,
                retry_backoff_s=c.retry_backoff_ms / 1000,
            )
        producing = idempotence.Producing(seq, transactional=txn is not None, gate=txn)
    sender = Sender(
        acc,
        metadata,
        pool,
        acks=c.acks,
        max_in_flight=c.max_in_flight,
        request_timeout_ms=c.request_timeout_ms,
        retries=c.retries,
        retry_backoff_ms=c.retry_backoff_ms,
        max_request_size=c.max_request_size,
        client_id=c.client_id,
        producing=producing,
        transactional_id=c.transactional_id or "",
    )
    if txn is not None:
        txn.wake_sender = sender.wake
    return ProducerParts(pool, metadata, acc, topics, bulk, txn, sender)
