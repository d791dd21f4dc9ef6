"""The transactional copier of the transactions-under-bounces test (Kafka's transactions_test).

Run as a process: ``python -m tests.txn.copier --bootstrap B --input IN --output OUT --group G
--transactional-id T --log FILE``. It reads every partition of IN (manual assignment, positions
from G's committed offsets with require_stable semantics, read_committed), and for each poll
runs one transaction: copy the records to the same partition of OUT with a header ``txn =
<pid>-<n>`` naming the transaction, ``send_offsets_to_transaction`` for the positions after
them, then ``commit_transaction``. Before each commit it appends ``<txn> <unix time>`` to FILE
(flushed and fsynced), so the test can prove no record was visible before its transaction's
commit began.

A commit whose answer is lost (a retriable error, e.g. a timeout while a partition's leader
fails over) is committed again: once EndTxn(commit) was sent only that outcome may be asked
for (Kafka's rule). On an abortable error it aborts and rewinds to the committed offsets; on
a fatal one (fenced by a newer incarnation, out-of-order sequence) it exits 3. With
``--abort-every K`` every Kth transaction is aborted on purpose after its records were written
(so aborted data certainly exists). SIGTERM is a clean stop: the current transaction is
finished, then the producer and consumer close (exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time

from headwater import errors
from headwater.client import AsyncConsumer, AsyncProducer, TopicPartition

log = logging.getLogger("copier")
FATAL = (errors.ProducerFencedError, errors.OutOfOrderSequenceNumberError)


async def rewind(consumer: AsyncConsumer, tps: list[TopicPartition]) -> None:
    committed = await consumer.committed(tps)
    for tp in tps:
        offset = committed.get(tp)
        if offset is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, offset)


async def commit(producer: AsyncProducer, txn: str) -> None:
    """commit_transaction(), re-sent while its answer is lost (a retriable error: the
    coordinator answers once the markers are written, and a leader may be failing over)."""
    while True:
        try:
            await producer.commit_transaction()
            return
        except errors.HeadwaterError as exc:
            if not exc.retriable:
                raise
            log.warning("commit of %s not answered (%s); committing again", txn, exc)


async def run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    consumer = AsyncConsumer(
        args.bootstrap,
        group_id=args.group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = AsyncProducer(args.bootstrap, transactional_id=args.transactional_id, linger_ms=2)
    out = open(args.log, "a", encoding="utf-8")  # noqa: SIM115 - closed in finally
    try:
        await producer.init_transactions()
        tps = [TopicPartition(args.input, p) for p in range(args.partitions)]
        consumer.assign(tps)
        await rewind(consumer, tps)
        n = 0
        while not stop.is_set():
            records = await consumer.poll(timeout_ms=300, max_records=args.max_records)
            if not records:
                continue
            n += 1
            txn = f"{os.getpid()}-{n}"
            try:
                producer.begin_transaction()
                futures = [
                    await producer.send(
                        args.output,
                        r.value,
                        r.key,
                        partition=r.partition,
                        headers=[("txn", txn.encode())],
                    )
                    for r in records
                ]
                positions = {tp: await consumer.position(tp) for tp in tps}
                await producer.send_offsets_to_transaction(positions, args.group)
                await asyncio.gather(*futures)
                if args.abort_every and n % args.abort_every == 0:
                    await producer.abort_transaction()  # on purpose: its records must stay unseen
                    await rewind(consumer, tps)
                    continue
                out.write(f"{txn} {time.time():.6f}\n")
                out.flush()
                os.fsync(out.fileno())
                await commit(producer, txn)
            except FATAL as exc:
                log.error("fatal: %s", exc)
                return 3
            except errors.HeadwaterError as exc:
                log.warning("transaction %s failed (%s); aborting", txn, exc)
                with contextlib.suppress(errors.HeadwaterError):
                    await producer.abort_transaction()
                await rewind(consumer, tps)
        return 0
    finally:
        out.close()
        with contextlib.suppress(Exception):
            await producer.close()
        with contextlib.suppress(Exception):
            await consumer.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--transactional-id", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--max-records", type=int, default=100)
    p.add_argument("--abort-every", type=int, default=0, help="abort every Kth transaction")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s copier %(message)s")
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
