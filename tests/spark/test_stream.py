"""spark.readStream.format("headwater"): checkpointed offsets, admission control,
Trigger.AvailableNow, a killed query resumed exactly once, failOnDataLoss, commitToGroup."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from headwater_spark.options import ExecutorConfig
from headwater_spark.planning import OffsetRange
from headwater_spark.reader import read_range
from headwater_spark.resolver import DataLossError
from pyspark.errors import StreamingQueryException

from headwater.client import AdminClient, TopicPartition
from tests.helpers.spark import make_topic, produce
from tests.helpers.wait import wait_for

HERE = Path(__file__).resolve().parent


def _stream(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.readStream.format("headwater").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _run_available_now(df: Any, output: Path, checkpoint: Path) -> Any:
    query = (
        df.select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive, "availableNow query did not finish within 120 s"
    return query


def _output(spark: Any, output: Path) -> list[tuple[int, int, bytes]]:
    rows = spark.read.parquet(str(output)).collect()
    return [(r.partition, r.offset, bytes(r.value)) for r in rows]


def _commits(checkpoint: Path) -> int:
    d = checkpoint / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.is_dir() else 0


def test_killed_query_resumes_from_checkpoint_exactly_once(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    make_topic(cluster.bootstrap, "clicks", 2)
    first = [(i % 2, None, b"c%04d" % i) for i in range(400)]
    produce(cluster.bootstrap, "clicks", first)
    checkpoint, output = tmp_path / "ckpt", tmp_path / "out"
    job_log = tmp_path / "job.log"
    with job_log.open("wb") as sink:
        job = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "stream_job.py"),
                cluster.bootstrap,
                "clicks",
                str(checkpoint),
                str(output),
                "60",
            ],
            stdout=sink,
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
        job.kill()  # SIGKILL by PID, mid-run: 400 records need ~7 batches of 60
        job.wait(30)
    assert _commits(checkpoint) < 7
    second = [(i % 2, None, b"d%04d" % i) for i in range(100)]
    produce(cluster.bootstrap, "clicks", second)

    df = _stream(
        spark,
        cluster.bootstrap,
        subscribe="clicks",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="60",
    )
    query = _run_available_now(df, output, checkpoint)
    got = _output(spark, output)
    assert len(got) == len({(p, o) for p, o, _ in got}), "duplicates in the file sink"
    assert sorted(v for _, _, v in got) == sorted(v for _, _, v in first + second)
    # admission control: no micro-batch of the resumed run read more than 60 offsets
    assert query.recentProgress and all(p["numInputRows"] <= 60 for p in query.recentProgress)
    end = json.loads(query.recentProgress[-1]["sources"][0]["endOffset"])
    assert end == {"clicks": {"0": 250, "1": 250}}


def test_available_now_reads_only_what_was_there(spark: Any, cluster: Any, tmp_path: Path) -> None:
    make_topic(cluster.bootstrap, "avail", 3)
    produce(cluster.bootstrap, "avail", [(i % 3, b"k", b"a%d" % i) for i in range(30)])
    df = _stream(spark, cluster.bootstrap, subscribe="avail", startingOffsets="earliest")
    _run_available_now(df, tmp_path / "o", tmp_path / "c")
    assert len(_output(spark, tmp_path / "o")) == 30
    produce(cluster.bootstrap, "avail", [(i % 3, b"k", b"b%d" % i) for i in range(9)])
    _run_available_now(df, tmp_path / "o", tmp_path / "c")
    got = _output(spark, tmp_path / "o")
    assert len(got) == 39 and len({(p, o) for p, o, _ in got}) == 39


def _log_start(bootstrap: str, topic: str) -> int:
    with AdminClient(bootstrap) as admin:
        return admin.list_offsets({TopicPartition(topic, 0): "earliest"})[
            TopicPartition(topic, 0)
        ].offset


def test_retention_deleting_unread_data_triggers_fail_on_data_loss(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    make_topic(cluster.bootstrap, "lossy", 1, **{"segment.bytes": "1024"})
    produce(cluster.bootstrap, "lossy", [(0, None, b"a" * 100)] * 20)
    out, ckpt = tmp_path / "o", tmp_path / "c"
    df = _stream(spark, cluster.bootstrap, subscribe="lossy", startingOffsets="earliest")
    _run_available_now(df, out, ckpt)
    assert len(_output(spark, out)) == 20
    for wave in range(5):  # one batch per wave: each rolls a new 1 KiB segment
        produce(cluster.bootstrap, "lossy", [(0, None, b"b%d" % wave + b"b" * 98)] * 20)
    with AdminClient(cluster.bootstrap) as admin:
        admin.alter_topic_configs("lossy", {"retention.bytes": "2048"})
    # the broker's retention pass runs every 30 s
    log_start = wait_for(
        lambda: (n := _log_start(cluster.bootstrap, "lossy")) > 20 and n,
        timeout=90,
        what="retention to delete unread offsets",
    )

    # failOnDataLoss=true (default): the query fails, naming the lost offsets
    query = df.writeStream.format("parquet").option("path", str(out))
    query = query.option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start()
    with pytest.raises(StreamingQueryException, match="deleted before they were read"):
        query.awaitTermination(120)
    assert len(_output(spark, out)) == 20

    # failOnDataLoss=false: the same checkpoint resumes at the log start
    df2 = _stream(
        spark,
        cluster.bootstrap,
        subscribe="lossy",
        startingOffsets="earliest",
        failOnDataLoss="false",
    )
    _run_available_now(df2, out, ckpt)
    offsets = sorted(o for _, o, _ in _output(spark, out))
    assert offsets == list(range(20)) + list(range(log_start, 120))

    # the executor's own check (retention running between planning and reading)
    cfg = ExecutorConfig(cluster.bootstrap, True, False, 30_000, 1 << 20, True)
    with pytest.raises(DataLossError, match="deleted before being read"):
        list(read_range(cfg, OffsetRange("lossy", 0, 10, 120)))
    skipped = list(
        read_range(replace(cfg, fail_on_data_loss=False), OffsetRange("lossy", 0, 10, 120))
    )
    assert [o for b in skipped for o in b.column("offset").to_pylist()] == list(
        range(log_start, 120)
    )

    # batch: explicit offsets below the log start are data loss too
    batch = (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", "lossy")
        .option("startingOffsets", '{"lossy": {"0": 0}}')
    )
    with pytest.raises(Exception, match="deleted before they were read"):
        batch.load().collect()
    rows = batch.option("failOnDataLoss", "false").load().select("offset").collect()
    assert [r.offset for r in rows] == list(range(log_start, 120))
