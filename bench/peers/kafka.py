"""Apache Kafka side by side: KRaft nodes from Maven Central, Kafka's perf tools, confluent-kafka.

Run::

    .venv/bin/python bench/peers/kafka.py --out rows.jsonl [--quick] [--no-rf3] [--max-seconds 30]

Obtaining Kafka: downloads.apache.org is not reachable here, Maven Central is, so
``bench/peers/kafka_jars/pom.xml`` lists ``org.apache.kafka:kafka_2.13`` (broker), ``kafka-tools``
(ProducerPerformance, ConsumerPerformance, TopicCommand) and a log4j2 backend, and
``mvn dependency:copy-dependencies`` puts them in ``~/.cache/headwater-bench/kafka-<ver>/libs``
(once; later runs reuse it). Processes are ``java -cp 'libs/*' <main class>``; Java 17 is the
Debian ``openjdk-17`` package.

Cluster (config name ``kraft-combined``): every node is a combined broker+controller
(``process.roles=broker,controller``) on 127.0.0.1 with ports from ``free_port()`` and a static
quorum (``controller.quorum.voters``), storage formatted with ``kafka.tools.StorageTool format``.
RF=1 rows: one node. RF=3 rows: three nodes (a 3-voter quorum), topics with
``replication.factor=3`` and ``min.insync.replicas=2`` (the durable setup of Kafka's docs,
"Replication" / "Availability and Durability Guarantees":
https://kafka.apache.org/documentation/#design_ha). Heap: ``-Xms1g -Xmx1g`` per node, the default
of ``kafka-server-start.sh``, with the G1 flags of ``kafka-run-class.sh``
(``-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35``). Flush settings
are Kafka's defaults: no application fsync; durability comes from replication, as the docs
recommend ("We recommend using the default flush settings which disable application fsync
entirely", https://kafka.apache.org/documentation/#appvsosflush). Headwater's rows should be read
with that in mind (say in the table which system fsyncs).

Clients:

* ``java perf-test``: ``org.apache.kafka.tools.ProducerPerformance`` /
  ``ConsumerPerformance`` (what ``kafka-producer-perf-test.sh`` / ``kafka-consumer-perf-test.sh``
  run). produce-max uses ``--throughput -1`` and the throughput producer config below;
  produce-fixed uses ``--throughput <10 MB/s in records/s>`` and the latency config. Both pass
  ``--warmup-records <10% of the run>``: the row is the tool's "steady state" line (JIT warmup
  excluded), the whole-run line is kept in ``extra["whole_run"]``. That line gives records/s
  and p50/p99/p99.9 ack latency (whole ms: the tool rounds); MB/s are recomputed with
  MB = 10**6 (the tool prints MiB). ``--max-seconds`` caps the tool's wall time plus 10 s for
  the JVM start; stopped early, the row sums the tool's 1 s report windows (no percentiles).
  ConsumerPerformance: the figure is ``fetch.nMsg.sec`` (fetch time, group join excluded; the
  total including the join is in ``extra``). e2e rows are Python only (ProducerPerformance
  cannot stamp values).
* ``python confluent-kafka`` (PyPI wheel bundling librdkafka): produce-max and produce-fixed
  (delivery report latencies from ``Message.latency()``; produce-fixed paced by
  :class:`Pacer`), consume (``assign`` from the beginning, no group join),
  e2e (a producer process paced by :class:`Pacer` with :func:`stamp` values, the consumer in
  this process computing :func:`age_ns` per record).

Producer configurations (the figures depend on them, so they are fixed here):

* ``throughput`` (produce-max): ``linger.ms=10``, ``batch.size=131072``,
  ``compression.type=none`` (Headwater's rows are uncompressed), ``acks`` per row; from
  Confluent's "Optimize for throughput" (batch.size 100000-200000, linger.ms 10-100,
  https://docs.confluent.io/cloud/current/client-apps/optimizing/throughput.html) minus
  compression. librdkafka: ``linger.ms=10``, ``batch.size=1000000``,
  ``queue.buffering.max.messages=1000000``.
* ``latency`` (produce-fixed, e2e): ``linger.ms=5``, ``compression.type=none``, ``acks`` per
  row, consumer ``fetch.min.bytes=1``. linger.ms=5 is the default of both clients (Java
  since Kafka 4.0, KIP-1030, whose rationale is that a little batching costs almost nothing
  and lowers the request rate the broker has to serve; librdkafka since 1.x). Confluent's
  "Optimize for latency"
  (https://docs.confluent.io/cloud/current/client-apps/optimizing/latency.html) suggests
  linger.ms=0, but here (2 shared cores, 3 JVM nodes) linger.ms=0 with acks=all at RF=3 made
  one produce request per record and could not sustain 10 MB/s (dev run: 5.7k of 9.8k
  records/s, p50 4.4 s; with linger.ms=5: 9.7k records/s, p50 124 ms, same loaded machine).

Mapping: partitions = topic partitions (the producer's default partitioner spreads records
without keys), acks=1/all = Kafka's acks. Consume rows read the topic written by the same
client's produce-max acks=1 row, from the start.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers.common import (
    FIXED_RATE_SECONDS,
    MB,
    Pacer,
    Row,
    Workload,
    age_ns,
    append_row,
    cache_dir,
    payload_pool,
    percentiles_ms,
    record_count,
    selected,
    stamp,
    warm_page_cache,
    workloads,
)
from headwater.dev.procs import ChildProcess, free_port, wait_until

KAFKA_VERSION = "4.3.1"  # latest release with both kafka_2.13 and kafka-tools on Maven Central
HERE = Path(__file__).resolve().parent / "kafka_jars"
SYSTEM = "kafka"
CONFIG = "kraft-combined"
JAVA_CLIENT = "java perf-test"
PY_CLIENT = "python confluent-kafka"
HEAP = ["-Xms1g", "-Xmx1g"]
JVM_OPTS = [
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]
JAVA_THROUGHPUT = {"linger.ms": "10", "batch.size": "131072", "compression.type": "none"}
JAVA_LATENCY = {"linger.ms": "5", "compression.type": "none"}
RDK_THROUGHPUT = {
    "linger.ms": 10,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "compression.type": "none",
}
RDK_LATENCY = {"linger.ms": 5, "compression.type": "none"}


def log(msg: str) -> None:
    print(f"[kafka] {msg}", flush=True)


# ---------------------------------------------------------------- obtaining the jars


def ensure_libs(version: str = KAFKA_VERSION) -> Path:
    """``libs`` folder with the broker, the tools and logging (resolved once with Maven)."""
    home = cache_dir(f"kafka-{version}")
    libs = home / "libs"
    if (libs / f"kafka_2.13-{version}.jar").exists() and (
        libs / f"kafka-tools-{version}.jar"
    ).exists():
        return libs
    if shutil.which("mvn") is None:
        raise SystemExit("kafka: mvn not found (apt-get install maven) and no cached jars")
    log(f"resolving Kafka {version} from Maven Central into {libs}")
    tmp = home / "libs.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(
        [
            "nice",
            "-n",
            "10",
            "mvn",
            "-q",
            "-B",
            "-f",
            str(HERE / "pom.xml"),
            f"-Dkafka.version={version}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={tmp}",
        ],
        check=True,
    )
    shutil.rmtree(libs, ignore_errors=True)
    tmp.rename(libs)
    return libs


def java_argv(libs: Path, main: str, *args: str, heap: list[str] | None = None) -> list[str]:
    return [
        "java",
        *(heap or []),
        *JVM_OPTS,
        f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}",
        "-cp",
        f"{libs}/*",
        main,
        *args,
    ]


# ---------------------------------------------------------------- the cluster


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaCluster:
    """``n`` combined broker+controller nodes on 127.0.0.1, data under ``root``; ``heap`` the
    JVM heap flags of each node (default :data:`HEAP`)."""

    def __init__(self, libs: Path, root: Path, nodes: int, heap: list[str] | None = None) -> None:
        self.libs = libs
        self.root = root
        self.n = nodes
        self.heap = heap or HEAP
        self.broker_ports = [free_port() for _ in range(nodes)]
        self.controller_ports = [free_port() for _ in range(nodes)]
        self.procs: list[ChildProcess] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.broker_ports)

    def properties(self, i: int) -> str:
        voters = ",".join(f"{j + 1}@127.0.0.1:{p}" for j, p in enumerate(self.controller_ports))
        rf = min(self.n, 3)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(i + 1),
            "controller.quorum.voters": voters,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.broker_ports[i]},"
                f"CONTROLLER://127.0.0.1:{self.controller_ports[i]}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.broker_ports[i]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.root / f"node{i + 1}" / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start(self) -> None:
        cluster_id = new_cluster_id()
        for i in range(self.n):
            d = self.root / f"node{i + 1}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "server.properties").write_text(self.properties(i))
            fmt = subprocess.run(
                java_argv(
                    self.libs,
                    "kafka.tools.StorageTool",
                    "format",
                    # one argument: a urlsafe-base64 id may start with "-", which argparse
                    # would take for an option
                    f"--cluster-id={cluster_id}",
                    "-c",
                    str(d / "server.properties"),
                ),
                capture_output=True,
                text=True,
            )
            if fmt.returncode != 0:
                raise RuntimeError(f"StorageTool format failed:\n{fmt.stdout}\n{fmt.stderr}")
        for i in range(self.n):
            d = self.root / f"node{i + 1}"
            p = ChildProcess(
                f"kafka-node{i + 1}",
                java_argv(self.libs, "kafka.Kafka", str(d / "server.properties"), heap=self.heap),
                d / "server.log",
            )
            p.start()
            self.procs.append(p)
        for p in self.procs:

            def started(p: ChildProcess = p) -> bool:
                return "Kafka Server started" in p.log_path.read_text(errors="replace")

            wait_until(
                started,
                timeout=120,
                what=f"{p.name} started",
                interval=0.25,
                watch=self.procs,
            )
        log(f"{self.n} node(s) up at {self.bootstrap} (pids {[p.pid for p in self.procs]})")

    def stop(self) -> None:
        """SIGTERM every node at once (one by one, the last nodes wait for a lost quorum), then
        SIGKILL whatever is still up after 20 s; by PID."""
        for p in self.procs:
            if p.alive() and p.proc is not None:
                p.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in self.procs:
            p.stop(timeout=max(0.1, deadline - time.monotonic()))

    def create_topic(self, name: str, partitions: int, rf: int) -> None:
        args = [
            "--bootstrap-server",
            self.bootstrap,
            "--create",
            "--topic",
            name,
            "--partitions",
            str(partitions),
            "--replication-factor",
            str(rf),
        ]
        if rf >= 3:
            args += ["--config", "min.insync.replicas=2"]
        r = subprocess.run(
            java_argv(self.libs, "org.apache.kafka.tools.TopicCommand", *args),
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise RuntimeError(f"create topic {name} failed:\n{r.stdout}\n{r.stderr}")
        if os.environ.get("KAFKA_BENCH_DESCRIBE"):
            d = subprocess.run(
                java_argv(
                    self.libs,
                    "org.apache.kafka.tools.TopicCommand",
                    "--bootstrap-server",
                    self.bootstrap,
                    "--describe",
                    "--topic",
                    name,
                ),
                capture_output=True,
                text=True,
            )
            log(d.stdout.strip())


@contextmanager
def running_cluster(
    libs: Path, nodes: int, *, heap: list[str] | None = None, root: Path | None = None
) -> Iterator[KafkaCluster]:
    """A started :class:`KafkaCluster`, stopped (by PID) on exit; its data in a temporary folder
    removed on exit, or under ``root``, kept."""
    keep = root is not None
    if root is None:
        root = Path(tempfile.mkdtemp(prefix=f"kafka-bench-{nodes}n-"))
    c = KafkaCluster(libs, root, nodes, heap)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def topic_name(client: str, w: Workload) -> str:
    kind = "produce-max" if w.kind == "consume" else w.kind
    acks = "1" if w.kind == "consume" else w.acks
    tag = "java" if client == JAVA_CLIENT else "py"
    return f"{tag}-{kind}-p{w.partitions}-s{w.record_size}-a{acks}-rf{w.rf}"


# ---------------------------------------------------------------- java perf tools

FINAL = re.compile(
    r"(\d+)(?: steady state)? records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), "
    r"([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)
WINDOW = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec", re.M)


def run_tool(argv: list[str], max_seconds: float) -> tuple[str, bool, float]:
    """Run a perf tool; SIGTERM it after ``max_seconds`` (returns output, timed-out, seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=max_seconds)
        return out, False, time.monotonic() - t0
    except BaseException as e:  # SIGTERM/Ctrl-C of the harness: the tool goes too
        if not isinstance(e, subprocess.TimeoutExpired):
            p.kill()
            p.wait()
            raise
        p.terminate()
        try:
            out, _ = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        return out, True, time.monotonic() - t0


def java_produce(
    c: KafkaCluster,
    w: Workload,
    quick: bool,
    max_seconds: float,
    client_heap: list[str],
    topic: str | None = None,
    n: int | None = None,
) -> Row:
    """ProducerPerformance for ``w``. ``topic``: an existing topic to write (the caller
    created it); by default one named after the workload is created first. ``n``: records of
    a produce-max run (default :func:`record_count`)."""
    fixed = w.kind == "produce-fixed"
    if fixed:
        assert w.rate_mb_s is not None
        rate = int(w.rate_mb_s * MB / w.record_size)
        n = rate * (5 if quick else FIXED_RATE_SECONDS)
        props = JAVA_LATENCY
    else:
        rate, props = -1, JAVA_THROUGHPUT
        n = n or record_count(w.record_size, quick)
    if not fixed:
        warm_page_cache()
    if topic is None:
        topic = topic_name(JAVA_CLIENT, w)
        c.create_topic(topic, w.partitions, w.rf)
    argv = java_argv(
        c.libs,
        "org.apache.kafka.tools.ProducerPerformance",
        "--bootstrap-server",
        c.bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(n),
        "--record-size",
        str(w.record_size),
        "--throughput",
        str(rate),
        "--reporting-interval",
        "1000",
        "--warmup-records",
        str(n // 10),
        "--command-property",
        f"acks={w.acks}",
        *(f"{k}={v}" for k, v in props.items()),
        heap=client_heap,
    )
    # + 10 s: JVM start and connection, before the tool's clock starts
    out, timed_out, wall = run_tool(argv, max_seconds + (30 if fixed else 10))
    finals = list(FINAL.finditer(out))  # the whole run, then the steady state (warmup excluded)
    m = finals[-1] if finals else None
    cfg = f"{CONFIG}/{'latency' if fixed else 'throughput'}"
    if m and not timed_out:
        recs, rps = int(m.group(1)), float(m.group(2))
        lat = {
            "p50": float(m.group(6)),
            "p99": float(m.group(8)),
            "p999": float(m.group(9)),
            "max": float(m.group(5)),
        }
        return Row.of(
            SYSTEM,
            JAVA_CLIENT,
            w,
            recs,
            recs / rps,
            latency_ms=lat,
            config=cfg,
            note=(
                "ProducerPerformance steady-state line (first 10% of records = JVM warmup, "
                "excluded; latency in whole ms as the tool prints)"
            ),
            extra={
                "avg_latency_ms": float(m.group(4)),
                "p95_ms": float(m.group(7)),
                "whole_run": finals[0].group(0),
                "records_written": int(finals[0].group(1)),
            },
        )
    # stopped at --max-seconds: sum the 1 s windows it printed (no percentiles then)
    windows = [(int(a), float(b)) for a, b in WINDOW.findall(out)]
    recs = sum(a for a, _ in windows)
    secs = sum(a / b for a, b in windows if b > 0)
    if not recs:
        raise RuntimeError(f"ProducerPerformance printed nothing usable:\n{out[-2000:]}")
    return Row.of(
        SYSTEM,
        JAVA_CLIENT,
        w,
        recs,
        secs,
        config=cfg,
        note=f"stopped at --max-seconds ({wall:.0f}s wall): sum of the tool's 1 s windows",
    )


def java_consume(
    c: KafkaCluster, w: Workload, expected: int, max_seconds: float, client_heap: list[str]
) -> Row:
    argv = java_argv(
        c.libs,
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        c.bootstrap,
        "--topic",
        topic_name(JAVA_CLIENT, w),
        "--num-records",
        str(expected),
        "--timeout",
        "10000",  # ms without a record before it gives up (the topic may hold fewer)
        "--group",
        f"perf-{uuid.uuid4().hex[:8]}",
        heap=client_heap,
    )
    out, _, _ = run_tool(argv, max_seconds + 30)
    lines = [ln for ln in out.splitlines() if ln.count(",") >= 9]
    if len(lines) < 2 or not lines[0].startswith("start.time"):
        raise RuntimeError(f"ConsumerPerformance printed nothing usable:\n{out[-2000:]}")
    head = [h.strip() for h in lines[0].split(",")]
    vals = dict(zip(head, (v.strip() for v in lines[-1].split(",")), strict=False))
    recs = int(vals["data.consumed.in.nMsg"])
    fetch_ms = float(vals["fetch.time.ms"])
    rebalance_ms = float(vals["rebalance.time.ms"])
    return Row.of(
        SYSTEM,
        JAVA_CLIENT,
        w,
        recs,
        fetch_ms / 1000,
        config=f"{CONFIG}/consumer-defaults",
        note="ConsumerPerformance fetch time (group join excluded)",
        extra={"rebalance_ms": rebalance_ms, "total_nMsg_sec": float(vals["nMsg.sec"])},
    )


# ---------------------------------------------------------------- confluent-kafka


def py_produce_max(
    c: KafkaCluster,
    w: Workload,
    quick: bool,
    max_seconds: float,
    topic: str | None = None,
    n: int | None = None,
) -> Row:
    """confluent-kafka ``produce()`` as fast as it goes; ``topic`` and ``n`` as in
    :func:`java_produce`."""
    from confluent_kafka import Producer

    if topic is None:
        topic = topic_name(PY_CLIENT, w)
        c.create_topic(topic, w.partitions, w.rf)
    pool = payload_pool(w.record_size)
    n = n or record_count(w.record_size, quick)
    warm_page_cache()
    lat: list[float] = []
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            lat.append(msg.latency())  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": w.acks, **RDK_THROUGHPUT})
    produce, poll = p.produce, p.poll
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    sent = 0
    np_ = len(pool)
    while sent < n:
        try:
            produce(topic, pool[sent % np_], on_delivery=on_delivery)
            sent += 1
        except BufferError:
            poll(0.01)
            if time.monotonic() > deadline:
                break
            continue
        if sent & 1023 == 0:
            poll(0)
            if time.monotonic() > deadline:
                break
    p.flush(60)
    secs = time.monotonic() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    return Row.of(
        SYSTEM,
        PY_CLIENT,
        w,
        len(lat),
        secs,
        latency_ms=percentiles_ms(np.asarray(lat) * 1e9),
        config=f"{CONFIG}/throughput",
        note="delivery-report latency (Message.latency())",
    )


def py_produce_fixed(c: KafkaCluster, w: Workload, quick: bool) -> Row:
    """Paced at ``w.rate_mb_s`` with :class:`Pacer`; ack latency from the delivery reports."""
    from confluent_kafka import Producer

    assert w.rate_mb_s is not None
    topic = topic_name(PY_CLIENT, w)
    c.create_topic(topic, w.partitions, w.rf)
    pool = payload_pool(w.record_size)
    seconds = 5 if quick else FIXED_RATE_SECONDS
    lat: list[float] = []
    errors: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            lat.append(msg.latency())  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": w.acks, **RDK_LATENCY})
    pacer = Pacer(w.rate_mb_s * MB / w.record_size)
    t0 = time.monotonic()
    end = t0 + seconds
    i = 0
    while time.monotonic() < end:
        pacer.wait(1)
        p.produce(topic, pool[i % len(pool)], on_delivery=on_delivery)
        i += 1
        p.poll(0)
    p.flush(60)
    secs = time.monotonic() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    return Row.of(
        SYSTEM,
        PY_CLIENT,
        w,
        len(lat),
        secs,
        latency_ms=percentiles_ms(np.asarray(lat) * 1e9),
        config=f"{CONFIG}/latency",
        note="paced with Pacer; delivery-report latency (Message.latency())",
    )


def py_consume(c: KafkaCluster, w: Workload, expected: int, max_seconds: float) -> Row:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    topic = topic_name(PY_CLIENT, w)
    cons = Consumer(
        {
            "bootstrap.servers": c.bootstrap,
            "group.id": f"py-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.min.bytes": 100_000,
        }
    )
    try:
        t0 = time.monotonic()
        cons.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(w.partitions)])
        deadline = t0 + max_seconds
        got = 0
        t_last = t0
        while got < expected and time.monotonic() < deadline:
            # never ask for more than remain: consume() waits for n records or the timeout
            for m in cons.consume(min(10_000, expected - got), 1.0):
                if m.error() is None:
                    got += 1
            t_last = time.monotonic()
    finally:
        cons.close()
    return Row.of(
        SYSTEM,
        PY_CLIENT,
        w,
        got,
        t_last - t0,
        config=f"{CONFIG}/consumer fetch.min.bytes=100000",
        note="assign() from the beginning, no group join",
    )


def e2e_producer_main(argv: list[str]) -> None:
    """Child process of the e2e rows: stamped values at ``--rate-mb-s`` for ``--seconds``."""
    from confluent_kafka import Producer

    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap")
    ap.add_argument("--topic")
    ap.add_argument("--acks")
    ap.add_argument("--size", type=int)
    ap.add_argument("--rate-mb-s", type=float)
    ap.add_argument("--seconds", type=float)
    a = ap.parse_args(argv)
    pool = payload_pool(a.size)
    p = Producer({"bootstrap.servers": a.bootstrap, "acks": a.acks, **RDK_LATENCY})
    pacer = Pacer(a.rate_mb_s * MB / a.size)
    end = time.monotonic() + a.seconds
    i = 0
    while time.monotonic() < end:
        pacer.wait(1)
        p.produce(a.topic, stamp(pool[i % len(pool)]))
        i += 1
        p.poll(0)
    p.flush(30)
    print(f"sent {i}", flush=True)


def py_e2e(c: KafkaCluster, w: Workload, quick: bool) -> Row:
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    assert w.rate_mb_s is not None
    topic = topic_name(PY_CLIENT, w)
    c.create_topic(topic, w.partitions, w.rf)
    seconds = 5 if quick else FIXED_RATE_SECONDS
    cons = Consumer(
        {
            "bootstrap.servers": c.bootstrap,
            "group.id": f"e2e-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.min.bytes": 1,
            "fetch.wait.max.ms": 100,
        }
    )
    ages: list[int] = []
    try:
        cons.assign([TopicPartition(topic, i, OFFSET_END) for i in range(w.partitions)])
        cons.consume(1, 1.0)  # resolve the end offsets before the producer starts
        prod = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--e2e-producer",
                "--bootstrap",
                c.bootstrap,
                "--topic",
                topic,
                "--acks",
                w.acks,
                "--size",
                str(w.record_size),
                "--rate-mb-s",
                str(w.rate_mb_s),
                "--seconds",
                str(seconds),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            idle_since = None
            t0 = time.monotonic()
            while True:
                # poll(), not consume(n, timeout): consume waits for n records or the timeout,
                # which would add up to n / rate to every age
                m = cons.poll(0.2)
                if m is not None and m.error() is None:
                    ages.append(age_ns(m.value()))  # type: ignore[arg-type]
                if m is not None:
                    idle_since = None
                elif prod.poll() is not None:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 2:
                        break
                if time.monotonic() - t0 > seconds + 60:
                    break
            out, _ = prod.communicate(timeout=30)
        finally:
            if prod.poll() is None:
                prod.kill()
                prod.wait()
    finally:
        cons.close()
    sent = int(out.split()[-1]) if out.strip() else 0
    return Row.of(
        SYSTEM,
        PY_CLIENT,
        w,
        len(ages),
        float(seconds),
        latency_ms=percentiles_ms(ages),
        config=f"{CONFIG}/latency",
        note=(
            "producer process paced with Pacer, consumer here (assign at end, "
            "fetch.min.bytes=1, poll() per record)"
        ),
        extra={"sent": sent},
    )


# ---------------------------------------------------------------- driver


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    # side_by_side.py stops a harness that overran with SIGTERM: turn it into SystemExit so the
    # finally blocks stop the Kafka nodes (own sessions) and the client processes by PID
    signal.signal(signal.SIGTERM, _terminated)
    if "--e2e-producer" in sys.argv:
        e2e_producer_main([a for a in sys.argv[1:] if a != "--e2e-producer"])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-rf3", action="store_true")
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--no-python", action="store_true", help="only the Java perf tools")
    ap.add_argument(
        "--no-java", action="store_true", help="only confluent-kafka (the per-record rows)"
    )
    ap.add_argument("--only", default="", help="run only workloads whose key contains this")
    a = ap.parse_args()
    try:
        import confluent_kafka  # noqa: F401

        have_py = not a.no_python
    except ImportError:
        if a.no_java:
            raise SystemExit(
                "kafka: --no-java asks for confluent-kafka's rows only, and confluent-kafka "
                "is missing (pip install -e '.[bench]')"
            ) from None
        log("confluent-kafka missing (pip install -e '.[bench]'): java rows only")
        have_py = False
    if shutil.which("java") is None:
        raise SystemExit("kafka: java not found (apt-get install openjdk-17-jre-headless)")
    libs = ensure_libs()
    ws = workloads(include_rf3=not a.no_rf3)
    ws = [w for w in ws if selected(a.only, w.key)]
    client_heap = ["-Xmx1g"]
    for rf in sorted({w.rf for w in ws}):
        group = [w for w in ws if w.rf == rf]
        with running_cluster(libs, nodes=rf) as c:
            produced: dict[tuple[str, int, int], int] = {}
            for w in group:
                clients = [JAVA_CLIENT, PY_CLIENT] if have_py else [JAVA_CLIENT]
                if a.no_java and have_py:
                    clients = [PY_CLIENT]
                for client in clients:
                    k = (client, w.partitions, w.record_size)
                    java = client == JAVA_CLIENT
                    try:
                        if w.kind == "produce-max":
                            r = (
                                java_produce(c, w, a.quick, a.max_seconds, client_heap)
                                if java
                                else py_produce_max(c, w, a.quick, a.max_seconds)
                            )
                            if w.acks == "1":
                                # the topic holds the warmup records too
                                produced[k] = int(str(r.extra.get("records_written", r.records)))
                        elif w.kind == "consume":
                            if k not in produced:
                                log(f"skip {client} {w.key}: its produce-max row did not run")
                                continue
                            r = (
                                java_consume(c, w, produced[k], a.max_seconds, client_heap)
                                if java
                                else py_consume(c, w, produced[k], a.max_seconds)
                            )
                        elif w.kind == "produce-fixed":
                            r = (
                                java_produce(c, w, a.quick, a.max_seconds, client_heap)
                                if java
                                else py_produce_fixed(c, w, a.quick)
                            )
                        elif w.kind == "e2e" and not java:
                            r = py_e2e(c, w, a.quick)
                        else:
                            continue  # e2e: python only
                    except Exception as e:  # one failed row must not lose the others
                        log(f"FAILED {client} {w.key}: {e!r}")
                        continue
                    append_row(a.out, r)
                    lat = r.latency_ms or {}
                    log(
                        f"{r.client:24} {r.workload:45} {r.records_per_sec:>11,.0f} rec/s "
                        f"{r.mb_per_sec:8.1f} MB/s "
                        + " ".join(f"{k}={v:.2f}" for k, v in lat.items() if k != "max")
                    )
                if w.kind == "e2e" and not have_py:
                    log(f"skip {w.key}: the e2e rows need confluent-kafka")


if __name__ == "__main__":
    main()
