"""Spark's own Kafka source and sink side by side with the ``headwater`` data source, one run.

The same records (values of 100 B and 1 KiB, no key, spread evenly over 4 and 16 partitions)
go into a real Apache Kafka broker and into Headwater on this machine, and one local[2]
SparkSession reads and writes both:

* write: ``df.write.format("kafka")`` / ``.format("headwater")`` of ``spark.range(n)`` with a
  ``partition`` column (``id % partitions``) and a constant value; this is also how the topics
  that the reads use are filled, so both systems hold exactly the same records;
* read, for each topic: a batch ``count(*), sum(length(value))``; a streaming query with
  ``Trigger.AvailableNow`` and a ``foreachBatch`` running the same aggregate; the same with a
  fixed ``maxOffsetsPerTrigger`` (several micro-batches);
* write, streaming: a Parquet folder of 100 B records read with ``readStream`` (Trigger
  .AvailableNow, ``maxFilesPerTrigger`` -> several micro-batches) into Kafka (twice), and
  Headwater at-least-once and ``exactlyOnce=true`` (the transactional sink's cost) in both
  orders: at-least-once, exactly-once, exactly-once, at-least-once, each run's row named.

rows/s and MB/s (MB = 10**6 bytes of record values) per row, and Headwater / Kafka in rows/s.
One system runs at a time (Kafka first, then Headwater); each phase starts with a warm-up read.

Spark's Kafka connector: ``spark-sql-kafka-0-10_<scala>`` for the installed PySpark's Spark and
Scala version, or, when Maven Central does not have that version, the newest release of the same
major version below it (said in the output). Set-up resolves it with Maven
(``bench/spark_kafka/pom.xml``, ``mvn -C``: checksums checked) into
``~/.cache/headwater-bench/spark-kafka-<pyspark version>/`` and writes ``SHA256SUMS`` there;
later runs check the jars against it and need no network. Only the jars PySpark does not ship
(the connector, spark-token-provider-kafka, kafka-clients, commons-pool2) go in ``spark.jars``.
The broker is bench/peers/kafka.py's (Kafka from Maven Central, one KRaft node).

    python bench/spark_vs_kafka.py [--records-100 1000000] [--records-1k 250000]
        [--partitions 4,16] [--max-offsets-per-trigger 200000] [--stream-write-records 300000]
        [--stream-only] [--headwater-read-option KEY=VALUE ...] [--json results.json]

"A few million": ``--records-100 4000000 --records-1k 1000000``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.core import machine
from bench.peers.common import cache_dir
from bench.peers.kafka import ensure_libs, running_cluster
from headwater.dev.cluster import LocalCluster
from tests.helpers.spark import make_topic

HERE = Path(__file__).resolve().parent
CENTRAL = "https://repo.maven.apache.org/maven2/org/apache/spark"
# the jars spark.jars needs on top of PySpark's own (by artifact name)
EXTRA_ARTIFACTS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients")


def log(msg: str) -> None:
    print(f"[spark-vs-kafka] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- Spark's Kafka connector


def _pyspark() -> tuple[str, str, Path]:
    """Installed PySpark: (Spark version, Scala binary version, its jars folder)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    [scala_lib] = jars.glob("scala-library-*.jar")
    m = re.match(r"scala-library-(\d+\.\d+)\.", scala_lib.name)
    assert m, scala_lib.name
    return pyspark.__version__, m.group(1), jars


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``, ``x_2.13-4.2.0.jar`` -> ``x_2.13``."""
    return re.sub(r"-\d+\.\d+[\w.\-]*\.jar$", "", jar)


def _published_version(spark_version: str, scala: str) -> str:
    """``spark_version`` if Maven Central has the connector for it, otherwise the newest
    release (no preview) of the same major version below it."""
    url = f"{CENTRAL}/spark-sql-kafka-0-10_{scala}/maven-metadata.xml"
    with urllib.request.urlopen(url, timeout=60) as r:
        versions = re.findall(r"<version>([\d.]+)</version>", r.read().decode())

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split("."))

    if spark_version in versions:
        return spark_version
    major = spark_version.split(".")[0]
    older = [v for v in versions if v.split(".")[0] == major and key(v) < key(spark_version)]
    if not older:
        raise SystemExit(f"no spark-sql-kafka-0-10_{scala} for Spark {major}.x on Maven Central")
    return max(older, key=key)


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ensure_kafka_connector() -> tuple[str, list[Path]]:
    """(connector version, jars for ``spark.jars``); resolved once, checked by SHA-256 after."""
    spark_version, scala, pyspark_jars = _pyspark()
    home = cache_dir(f"spark-kafka-{spark_version}")
    sums = home / "SHA256SUMS"
    if not sums.exists():
        version = _published_version(spark_version, scala)
        log(f"resolving spark-sql-kafka-0-10_{scala}:{version} from Maven Central into {home}")
        tmp = home / "jars.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(
            [
                *("nice", "-n", "10", "mvn", "-q", "-B", "-C"),
                *("-f", str(HERE / "spark_kafka" / "pom.xml")),
                f"-Dspark.version={version}",
                f"-Dscala.binary={scala}",
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={tmp}",
            ],
            check=True,
        )
        shipped = {_artifact(j.name) for j in pyspark_jars.glob("*.jar")}
        jars = home / "jars"
        shutil.rmtree(jars, ignore_errors=True)
        jars.mkdir()
        for j in sorted(tmp.glob("*.jar")):
            if _artifact(j.name) not in shipped:
                j.rename(jars / j.name)
        shutil.rmtree(tmp)
        (home / "version").write_text(version + "\n")
        sums.write_text("".join(f"{_sha256(j)}  {j.name}\n" for j in sorted(jars.glob("*.jar"))))
    version = (home / "version").read_text().strip()
    out = []
    for line in sums.read_text().splitlines():
        digest, name = line.split("  ", 1)
        jar = home / "jars" / name
        if _sha256(jar) != digest:
            raise SystemExit(f"{jar}: SHA-256 differs from {sums}; delete {home} to fetch again")
        out.append(jar)
    names = {_artifact(j.name) for j in out}
    missing = [a for a in EXTRA_ARTIFACTS if not any(n.startswith(a) for n in names)]
    if missing:
        raise SystemExit(f"{home}: no jar for {missing}; delete {home} to fetch again")
    return version, out


# ---------------------------------------------------------------- measurements


class Bench:
    """One SparkSession, the results, and what the two systems share."""

    def __init__(self, spark: Any, args: argparse.Namespace, tmp: Path) -> None:
        self.spark = spark
        self.args = args
        self.tmp = tmp
        self.rows: list[dict[str, Any]] = []
        self.partitions = [int(p) for p in args.partitions.split(",")]
        self.sizes = {100: args.records_100, 1024: args.records_1k}
        self.last_durations: dict[str, int] = {}

    def attempt(self, system: str, op: str, size: int, parts: int, fn: Callable[[], Any]) -> Any:
        """Run one measurement; a failure is recorded as an error row and the run goes on."""
        try:
            return fn()
        except Exception as e:
            row = {"system": system, "op": op, "record_size": size, "partitions": parts}
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            self.rows.append(row)
            log(json.dumps(row))
            self.save_partial()
            return None

    def save_partial(self) -> None:
        """Write the rows so far to ``--json`` (header "partial"), so a run stopped before its
        end still leaves every finished row; the end of the run rewrites it whole."""
        if self.args.json:
            doc = {"header": "partial: the run had not finished", "argv": sys.argv[1:]}
            self.args.json.write_text(json.dumps({**doc, "rows": self.rows}, indent=2))

    def record(
        self,
        system: str,
        op: str,
        size: int,
        parts: int,
        n: int,
        secs: float,
        durations: dict[str, int] | None = None,
    ) -> None:
        row = {
            "system": system,
            "op": op,
            "record_size": size,
            "partitions": parts,
            "records": n,
            "seconds": round(secs, 2),
            "rows_per_s": round(n / secs),
            "mb_per_s": round(n * size / secs / 1e6, 1),
            "load_avg_1m": round(os.getloadavg()[0], 1),
        }
        if durations:
            row["durations_ms"] = durations
        self.rows.append(row)
        log(json.dumps(row))
        self.save_partial()

    def source(self, fmt: str, bootstrap: str, topic: str, stream: bool) -> Any:
        r = self.spark.readStream if stream else self.spark.read
        r = r.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        if fmt == "headwater":
            for kv in self.args.headwater_read_option:
                k, _, v = kv.partition("=")
                r = r.option(k, v)
        return r.option("startingOffsets", "earliest")

    def batch_read(self, fmt: str, bootstrap: str, topic: str) -> tuple[int, int, float]:
        df = self.source(fmt, bootstrap, topic, stream=False).load()
        t0 = time.perf_counter()
        [r] = df.selectExpr("count(*) AS n", "coalesce(sum(length(value)), 0) AS b").collect()
        return int(r.n), int(r.b), time.perf_counter() - t0

    def stream_read(
        self, fmt: str, bootstrap: str, topic: str, max_offsets: int | None
    ) -> tuple[int, int, int, float]:
        """Trigger.AvailableNow into foreachBatch(count, sum(length(value))): (records, bytes,
        micro-batches, seconds from start() to the query's end). The query's progress
        ``durationMs`` (latestOffset, queryPlanning, addBatch, walCommit, ...), summed over its
        micro-batches, is kept in :attr:`last_durations`: where the time went."""
        totals = [0, 0, 0]

        def each(df: Any, _batch_id: int) -> None:
            [r] = df.selectExpr("count(*) AS n", "coalesce(sum(length(value)), 0) AS b").collect()
            totals[0] += int(r.n)
            totals[1] += int(r.b)
            totals[2] += 1

        reader = self.source(fmt, bootstrap, topic, stream=True)
        if max_offsets is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
        ckpt = tempfile.mkdtemp(prefix="ckpt-", dir=self.tmp)
        t0 = time.perf_counter()
        q = (
            reader.load()
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        if not q.awaitTermination(self.args.query_timeout):
            q.stop()
            raise RuntimeError(f"{fmt} stream read of {topic} still running after the timeout")
        secs = time.perf_counter() - t0
        if q.exception() is not None:
            raise RuntimeError(f"{fmt} stream read of {topic}: {q.exception()}")
        self._keep_durations(q)
        shutil.rmtree(ckpt, ignore_errors=True)
        return totals[0], totals[1], totals[2], secs

    def _keep_durations(self, query: Any) -> None:
        """The finished query's progress ``durationMs`` summed over its micro-batches, in
        :attr:`last_durations`."""
        self.last_durations = {}
        for p in query.recentProgress:
            for k, v in (p.durationMs or {}).items():
                self.last_durations[k] = self.last_durations.get(k, 0) + int(v)

    def generated(self, n: int, size: int, parts: int) -> Any:
        return self.spark.range(0, n, 1, 2).selectExpr(
            f"CAST(id % {parts} AS INT) AS partition",
            f"CAST(repeat('x', {size}) AS BINARY) AS value",
        )

    def write(self, fmt: str, bootstrap: str, topic: str, df: Any, **opts: str) -> float:
        w = df.write.format(fmt).option("kafka.bootstrap.servers", bootstrap)
        w = w.option("topic", topic)
        for k, v in opts.items():
            w = w.option(k, v)
        t0 = time.perf_counter()
        w.mode("append").save()
        return time.perf_counter() - t0

    def stream_write(self, fmt: str, bootstrap: str, topic: str, **opts: str) -> float:
        schema = "partition INT, value BINARY"
        src = (
            self.spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", str(self.args.files_per_trigger))
            .parquet(str(self.tmp / "stream-src"))
        )
        ckpt = tempfile.mkdtemp(prefix="ckpt-", dir=self.tmp)
        w = src.writeStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
        w = w.option("topic", topic).option("checkpointLocation", ckpt)
        for k, v in opts.items():
            w = w.option(k, v)
        t0 = time.perf_counter()
        q = w.trigger(availableNow=True).start()
        if not q.awaitTermination(self.args.query_timeout):
            q.stop()
            raise RuntimeError(f"{fmt} stream write to {topic} still running after the timeout")
        secs = time.perf_counter() - t0
        if q.exception() is not None:
            raise RuntimeError(f"{fmt} stream write to {topic}: {q.exception()}")
        self._keep_durations(q)
        return secs

    def check(self, what: str, got: tuple[int, int], want: tuple[int, int]) -> None:
        if got != want:
            raise RuntimeError(f"{what}: read (records, bytes) {got}, expected {want}")

    def run_system(
        self, system: str, fmt: str, bootstrap: str, make: Callable[[str, int], None]
    ) -> None:
        """Every row for one system: writes (which fill the topics), then reads."""
        topics = {}
        p0 = self.partitions[0]

        def warm_write() -> None:  # Python workers of the sink, producer connections
            make("warm-up", p0)
            self.write(fmt, bootstrap, "warm-up", self.generated(10_000, 100, p0))

        self.attempt(system, "warm-up", 0, 0, warm_write)
        for size, n in self.sizes.items():
            for parts in self.partitions:
                topic = f"s{size}-p{parts}"

                def write(topic: str = topic, parts: int = parts, n: int = n, size: int = size):
                    make(topic, parts)
                    secs = self.write(fmt, bootstrap, topic, self.generated(n, size, parts))
                    self.record(system, "write (batch df.write)", size, parts, n, secs)
                    return True

                if self.attempt(system, "write (batch df.write)", size, parts, write):
                    topics[topic] = (size, parts, n)
        if topics:  # warm-up: JVM, Python workers, connections
            first = next(iter(topics))
            self.attempt(system, "warm-up", 0, 0, lambda: self.batch_read(fmt, bootstrap, first))
        mopt = self.args.max_offsets_per_trigger
        for topic, (size, parts, n) in topics.items():

            def batch(topic: str = topic, size: int = size, parts: int = parts, n: int = n):
                got, nbytes, secs = self.batch_read(fmt, bootstrap, topic)
                self.check(f"{system} batch {topic}", (got, nbytes), (n, n * size))
                self.record(system, "read batch count/sum", size, parts, n, secs)

            def avail(topic: str = topic, size: int = size, parts: int = parts, n: int = n):
                got, nbytes, _, secs = self.stream_read(fmt, bootstrap, topic, None)
                self.check(f"{system} AvailableNow {topic}", (got, nbytes), (n, n * size))
                self.record(
                    system, "read stream AvailableNow", size, parts, n, secs, self.last_durations
                )

            def limited(topic: str = topic, size: int = size, parts: int = parts, n: int = n):
                got, nbytes, batches, secs = self.stream_read(fmt, bootstrap, topic, mopt)
                self.check(f"{system} maxOffsetsPerTrigger {topic}", (got, nbytes), (n, n * size))
                if batches < n // mopt:
                    raise RuntimeError(f"{topic}: {batches} micro-batches for {n} records")
                op = f"read stream maxOffsetsPerTrigger={mopt}"
                self.record(system, op, size, parts, n, secs, self.last_durations)

            if not self.args.stream_only:
                self.attempt(system, "read batch count/sum", size, parts, batch)
            self.attempt(system, "read stream AvailableNow", size, parts, avail)
            self.attempt(system, f"read stream maxOffsetsPerTrigger={mopt}", size, parts, limited)
        # streaming writes: the Parquet records into a fresh topic per sink and run; each sink
        # twice, Headwater's in both orders (at-least-once, exactly-once, exactly-once,
        # at-least-once) so neither pays the streaming sink's first start alone
        n, parts = self.args.stream_write_records, self.partitions[0]
        alo: tuple[str, dict[str, str]] = ("at-least-once", {})
        eo = ("exactly-once", {"exactlyOnce": "true", "transactionalIdPrefix": "bench-eo"})
        sinks = [alo, eo, eo, alo] if fmt == "headwater" else [alo, alo]
        runs: dict[str, int] = {}
        for name, opts in sinks:
            runs[name] = runs.get(name, 0) + 1
            topic = f"sw-{name}-{runs[name]}"
            op = f"write stream AvailableNow, {name} (run {runs[name]})"

            def swrite(
                topic: str = topic, name: str = name, opts: dict[str, str] = opts, op: str = op
            ):
                make(topic, parts)
                secs = self.stream_write(fmt, bootstrap, topic, **opts)
                durations = self.last_durations
                got, nbytes, _ = self.batch_read(fmt, bootstrap, topic)
                self.check(f"{system} stream write {name}", (got, nbytes), (n, n * 100))
                self.record(system, op, 100, parts, n, secs, durations)

            self.attempt(system, op, 100, parts, swrite)


# ---------------------------------------------------------------- the run


@contextmanager
def spark_session(jars: list[Path]) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import headwater_spark
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("spark-vs-kafka")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")  # loopback only
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.jars.ivy", "/nonexistent")  # nothing resolved at run time
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    headwater_spark.register(spark)
    try:
        yield spark
    finally:
        spark.stop()


def table(rows: list[dict[str, Any]]) -> str:
    errors = [r for r in rows if "error" in r]
    rows = [r for r in rows if "error" not in r]
    by = {(r["system"], r["op"], r["record_size"], r["partitions"]): r for r in rows}
    out = [
        "| operation | record | partitions | records | Kafka rows/s | Kafka MB/s "
        "| Headwater rows/s | Headwater MB/s | Headwater / Kafka |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    seen = set()
    for r in rows:
        key = (r["op"], r["record_size"], r["partitions"])
        if key in seen:
            continue
        seen.add(key)
        k, h = by.get(("kafka", *key)), by.get(("headwater", *key))
        if k is None and h is not None and "exactly-once" in r["op"]:
            k = by.get(("kafka", r["op"].replace("exactly-once", "at-least-once"), *key[1:]))
        size = "1 KiB" if r["record_size"] == 1024 else f"{r['record_size']} B"
        cells = [r["op"], size, str(r["partitions"]), f"{r['records']:,}"]
        for x in (k, h):
            cells += [f"{x['rows_per_s']:,}", str(x["mb_per_s"])] if x else ["-", "-"]
        cells.append(f"{h['rows_per_s'] / k['rows_per_s']:.2f}x" if k and h else "-")
        out.append("| " + " | ".join(cells) + " |")
    out += [
        f"\nFailed: {r['system']} {r['op']} ({r['record_size']} B, "
        f"{r['partitions']} partitions): {r['error']}"
        for r in errors
    ]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records-100", type=int, default=1_000_000)
    ap.add_argument("--records-1k", type=int, default=250_000)
    ap.add_argument("--partitions", default="4,16")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=200_000)
    ap.add_argument("--stream-write-records", type=int, default=300_000)
    ap.add_argument("--files-per-trigger", type=int, default=2, help="of 6 Parquet files")
    ap.add_argument("--query-timeout", type=float, default=1800)
    ap.add_argument("--systems", default="kafka,headwater")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument(
        "--headwater-read-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra option of the headwater reads (e.g. minRecordsPerTask=0); repeatable",
    )
    ap.add_argument(
        "--stream-only",
        action="store_true",
        help="no batch read rows (the batch writes still fill the topics)",
    )
    args = ap.parse_args()
    connector, jars = ensure_kafka_connector()
    kafka_libs = ensure_libs()
    pyspark_version = _pyspark()[0]
    load0 = os.getloadavg()
    t_start = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="hw-spark-vs-kafka-") as tmp_s,
        spark_session(jars) as spark,
    ):
        tmp = Path(tmp_s)
        bench = Bench(spark, args, tmp)
        bench.generated(args.stream_write_records, 100, bench.partitions[0]).repartition(
            6
        ).write.parquet(str(tmp / "stream-src"))
        systems = args.systems.split(",")
        if "kafka" in systems:
            with running_cluster(kafka_libs, 1) as kc:
                bench.run_system(
                    "kafka", "kafka", kc.bootstrap, lambda t, p: kc.create_topic(t, p, 1)
                )
        if "headwater" in systems:
            with LocalCluster(
                tmp / "headwater", brokers=1, controllers=1, coordinators=1
            ) as cluster:
                b = cluster.bootstrap
                bench.run_system("headwater", "headwater", b, lambda t, p: make_topic(b, t, p))
    load1 = os.getloadavg()
    header = (
        f"Machine: {machine()}; PySpark {pyspark_version}, spark-sql-kafka-0-10 {connector}; "
        f"load average at start {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, "
        f"at end {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f}; "
        f"{(time.monotonic() - t_start) / 60:.1f} min"
    )
    print(header)
    print()
    print(table(bench.rows))
    if args.json:
        args.json.write_text(
            json.dumps({"header": header, "argv": sys.argv[1:], "rows": bench.rows}, indent=2)
        )


if __name__ == "__main__":
    main()
