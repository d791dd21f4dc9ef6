"""writeStream.format("headwater") with exactlyOnce=true: micro-batches written in Headwater
transactions, decided on the driver, 0 duplicates for read_committed readers across a killed
and restarted query."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from headwater_spark import decisions
from headwater_spark.options import parse_sink_options
from headwater_spark.sink_txn import abort_batch, commit_batch, write_transactional

from headwater.client import Consumer, TopicPartition
from headwater.dev.cluster import LocalCluster
from headwater.errors import InvalidConfigError
from tests.helpers.spark import make_topic, produce
from tests.helpers.wait import wait_for

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir = tmp_path_factory.mktemp("spark-eo")
    with LocalCluster(
        data_dir, brokers=1, controllers=1, coordinators=1, etcd_unsafe_no_fsync=True
    ) as c:
        yield c


def _values(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value of ``topic`` a reader with ``isolation`` sees, up to its end offsets."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest")
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        out: list[bytes] = []

        def done() -> bool:
            out.extend(r.value or b"" for r in consumer.poll(timeout_ms=200, max_records=5000))
            return all(consumer.position(tp) >= end[tp] for tp in tps)

        wait_for(done, timeout=30, what=f"reading {topic} to its end")
        return out
    finally:
        consumer.close()


def _ends(bootstrap: str, topic: str, isolation: str) -> dict[TopicPartition, int]:
    tps = [TopicPartition(topic, p) for p in range(2)]
    consumer = Consumer(bootstrap, isolation_level=isolation)
    try:
        return consumer.end_offsets(tps)
    finally:
        consumer.close()


def _batch(values: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": pa.array(values, pa.binary())})


def test_exactly_once_options_are_checked() -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t", "exactlyOnce": "true"}
    with pytest.raises(InvalidConfigError, match="transactionalIdPrefix"):
        parse_sink_options(base)
    with pytest.raises(InvalidConfigError, match="acks=all"):
        parse_sink_options({**base, "transactionalIdPrefix": "q", "acks": "1"})
    with pytest.raises(InvalidConfigError, match="transactionTimeoutMs"):
        parse_sink_options({**base, "transactionalIdPrefix": "q", "transactionTimeoutMs": "1e9"})
    opts = parse_sink_options({**base, "transactionalIdPrefix": "q"})
    assert opts.exactly_once and opts.txn_prefix == "q" and opts.acks == "all"
    assert not parse_sink_options({**base, "exactlyOnce": "false"}).exactly_once


def test_decided_batch_is_replayed_not_rewritten(txn_cluster: LocalCluster) -> None:
    """The driver died after the decision and before its EndTxns: the re-run writes nothing,
    returns the recorded transactions, and the commit re-sends EndTxn (idempotently)."""
    bootstrap = txn_cluster.bootstrap
    make_topic(bootstrap, "eo-direct", 2)
    opts = parse_sink_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "topic": "eo-direct",
            "exactlyOnce": "true",
            "transactionalIdPrefix": "direct",
        }
    )
    rows = {k: [b"b0-p%d-%d" % (k, i) for i in range(20)] for k in (0, 1)}
    first = [write_transactional(opts, None, 0, k, iter([_batch(rows[k])])) for k in (0, 1)]
    assert all(m.handle is not None and m.handle.has_partitions for m in first)
    assert _values(bootstrap, "eo-direct", 2, "read_committed") == []
    # the commit point, then a "crash" before any EndTxn
    handles = tuple(m.handle for m in first if m.handle is not None)
    decisions.write_decision(bootstrap, opts.commit_topic, "direct", decisions.Decision(0, handles))
    pending = decisions.latest_decision(bootstrap, opts.commit_topic, "direct")
    assert pending == decisions.Decision(0, handles)
    again = [write_transactional(opts, pending, 0, k, iter([_batch(rows[k])])) for k in (0, 1)]
    assert [m.replayed for m in again] == [True, True]
    assert [m.handle for m in again] == [m.handle for m in first]
    abort_batch(opts, list(again), 0)  # a decided batch is never aborted
    commit_batch(opts, list(again), 0)
    commit_batch(opts, list(again), 0)  # a resent commit is answered success
    want = sorted(rows[0] + rows[1])
    assert sorted(_values(bootstrap, "eo-direct", 2, "read_committed")) == want

    # batch 1: a first attempt of partition 0 is fenced by a retry (init aborts it)
    zombie = write_transactional(opts, pending, 1, 0, iter([_batch([b"zombie"])]))
    retry = write_transactional(opts, pending, 1, 0, iter([_batch([b"b1"])]))
    assert not retry.replayed and zombie.handle != retry.handle
    commit_batch(opts, [retry], 1)
    assert sorted(_values(bootstrap, "eo-direct", 2, "read_committed")) == sorted([*want, b"b1"])
    assert b"zombie" in _values(bootstrap, "eo-direct", 2, "read_uncommitted")
    assert decisions.latest_decision(bootstrap, opts.commit_topic, "direct") == (
        decisions.Decision(1, (retry.handle,))
    )

    # Spark calls abort when commit raised, maybe after deciding: a decided batch stays
    late = write_transactional(opts, pending, 2, 1, iter([_batch([b"b2"])]))
    assert late.handle is not None
    decisions.write_decision(
        bootstrap, opts.commit_topic, "direct", decisions.Decision(2, (late.handle,))
    )
    abort_batch(opts, [late], 2)
    commit_batch(opts, [late], 2)
    got = _values(bootstrap, "eo-direct", 2, "read_committed")
    assert sorted(got) == sorted([*want, b"b1", b"b2"])
    # an undecided batch is aborted
    failed = write_transactional(opts, pending, 3, 1, iter([_batch([b"b3"])]))
    abort_batch(opts, [failed], 3)
    assert sorted(_values(bootstrap, "eo-direct", 2, "read_committed")) == sorted(got)
    assert _ends(bootstrap, "eo-direct", "read_committed") == _ends(
        bootstrap, "eo-direct", "read_uncommitted"
    ), "no transaction may stay open (the last stable offset reaches the high watermark)"


def _commits(checkpoint: Path) -> int:
    d = checkpoint / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.is_dir() else 0


def test_killed_query_restarted_has_no_duplicates(
    spark: Any, txn_cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = txn_cluster.bootstrap
    make_topic(bootstrap, "eo-in", 2)
    make_topic(bootstrap, "eo-out", 2)
    first = [(i % 2, b"k%d" % i, b"v%04d" % i) for i in range(400)]
    produce(bootstrap, "eo-in", first)
    checkpoint = tmp_path / "ckpt"
    job_log = tmp_path / "job.log"
    with job_log.open("wb") as out:
        job = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "eo_stream_job.py"),
                bootstrap,
                "eo-in",
                "eo-out",
                str(checkpoint),
                "copy",
                "40",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: _commits(checkpoint) >= 2 or job.poll() is not None,
            timeout=120,
            what="two committed micro-batches",
        )
        assert job.poll() is None, job_log.read_text()[-3000:]
    finally:
        job.kill()  # SIGKILL by PID, mid-run: 400 records need 10 batches of 40
        job.wait(30)
    assert _commits(checkpoint) < 10
    second = [(i % 2, b"k%d" % i, b"w%04d" % i) for i in range(100)]
    produce(bootstrap, "eo-in", second)

    query = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "eo-in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .select("key", "value")
        .writeStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "eo-out")
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", "copy")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None

    want = sorted(v for _, _, v in first + second)
    committed = _values(bootstrap, "eo-out", 2, "read_committed")
    assert sorted(committed) == want, "read_committed must see every record exactly once"
    # the micro-batches were decided through the decision topic (the transactional path ran)
    last = decisions.latest_decision(bootstrap, decisions.DEFAULT_COMMIT_TOPIC, "copy")
    assert last is not None and last.batch == query.lastProgress["batchId"]
    assert len(_values(bootstrap, "eo-out", 2, "read_uncommitted")) >= len(want)
    # the same through the source with kafka.isolation.level=read_committed
    rows = (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "eo-out")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select("value")
        .collect()
    )
    assert sorted(bytes(r.value) for r in rows) == want
