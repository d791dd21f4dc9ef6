"""The decision log of the exactly-once streaming sink: one compacted Headwater topic.

Layout: topic ``commitTopic`` (default ``__headwater_spark_commits``), 1 partition,
``cleanup.policy=compact``, replication min(3, brokers). One record per decided micro-batch:

    key   = transactionalIdPrefix (utf-8)          -- one live record per query (compaction)
    value = JSON {"batch": <batchId>, "txns": [[transactional_id, producer_id, epoch], ...]}

Writing a decision (acks=all, idempotent) is the commit point of a micro-batch: once it is
acknowledged the micro-batch's transactions must commit, whoever sends the EndTxns. Only the
latest decision of a query matters: Spark re-runs at most the last micro-batch of its offset
log after a restart, and every earlier one was committed (its EndTxns succeeded) before Spark
recorded it in the checkpoint's commit log.

Blocking functions for the driver; their client calls run on the process's one loop
(:mod:`headwater_spark.worker_loop`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from headwater import errors
from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer
from headwater.client.security import ClientSecurity
from headwater.client.txn_handoff import TxnHandle
from headwater.client.types import TopicPartition
from headwater_spark.options import DEFAULT_COMMIT_TOPIC
from headwater_spark.worker_loop import run as _run

__all__ = ["DEFAULT_COMMIT_TOPIC", "Decision", "latest_decision", "write_decision"]


@dataclass(frozen=True)
class Decision:
    """Micro-batch ``batch`` of a query commits exactly these transactions."""

    batch: int
    txns: tuple[TxnHandle, ...]

    def encode(self) -> bytes:
        return json.dumps(
            {
                "batch": self.batch,
                "txns": [[h.transactional_id, h.producer_id, h.producer_epoch] for h in self.txns],
            }
        ).encode()

    @staticmethod
    def decode(raw: bytes) -> Decision:
        doc = json.loads(raw)
        return Decision(
            int(doc["batch"]),
            tuple(TxnHandle(str(t), int(p), int(e), True) for t, p, e in doc["txns"]),
        )


async def _ensure_topic(bootstrap: str, topic: str, security: ClientSecurity | None) -> bool:
    """Create the decision topic if missing; True when it existed already."""
    admin = AsyncAdminClient(bootstrap, security=security)
    try:
        if topic in await admin.list_topics():
            return True
        brokers = len((await admin.describe_cluster()).brokers)
        try:
            await admin.create_topic(
                topic,
                1,
                max(1, min(3, brokers)),
                {"cleanup.policy": "compact", "segment.bytes": str(1 << 20)},
            )
        except errors.TopicAlreadyExistsError:
            return True
        return False
    finally:
        await admin.close()


async def _latest(
    bootstrap: str, topic: str, key: str, security: ClientSecurity | None
) -> Decision | None:
    if not await _ensure_topic(bootstrap, topic, security):
        return None  # just created: no decision can be in it
    tp = TopicPartition(topic, 0)
    consumer = AsyncConsumer(
        bootstrap, auto_offset_reset="earliest", client_id="headwater-spark", security=security
    )
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        found: Decision | None = None
        want = key.encode()
        while await consumer.position(tp) < end:
            for rec in await consumer.poll(timeout_ms=1000, max_records=10_000):
                if rec.offset < end and rec.key == want and rec.value is not None:
                    found = Decision.decode(rec.value)
        return found
    finally:
        await consumer.close()


async def _write(
    bootstrap: str, topic: str, key: str, decision: Decision, security: ClientSecurity | None
) -> None:
    await _ensure_topic(bootstrap, topic, security)
    async with AsyncProducer(bootstrap, acks="all", linger_ms=0, security=security) as producer:
        fut = await producer.send(topic, decision.encode(), key.encode(), partition=0)
        await producer.flush()
        await fut


def latest_decision(
    bootstrap: str, topic: str, prefix: str, security: ClientSecurity | None = None
) -> Decision | None:
    """The newest decision recorded for the query ``prefix`` (None: none yet). Creates the
    decision topic when it does not exist."""
    return _run(_latest(bootstrap, topic, prefix, security))


def write_decision(
    bootstrap: str,
    topic: str,
    prefix: str,
    decision: Decision,
    security: ClientSecurity | None = None,
) -> None:
    """Record ``decision``; returns once it is acknowledged by every in-sync replica."""
    _run(_write(bootstrap, topic, prefix, decision, security))
