"""Redis Streams on this machine: Debian's redis-server, driven by redis-py (hiredis parser).

    .venv/bin/python bench/peers/redis.py --out rows.jsonl [--quick] [--no-rf3] [--max-seconds 30]
                                          [--fsync everysec|always]

Installs ``redis-server`` and ``redis-tools`` with apt-get when missing (as root; otherwise it
prints the command and exits 2), starts its own servers on 127.0.0.1 (ports from free_port(),
data in a temporary folder), runs :data:`bench.peers.common.WORKLOADS` and stops every server by
PID, even on error.

Configuration (``Row.config``):

* ``aof-everysec`` (the default): ``appendonly yes``, ``appendfsync everysec`` — what Redis
  recommends when the data must persist (redis.conf shipped with the server: 'The default is
  "everysec", as that's usually the right compromise between speed and data safety ... If
  unsure, use "everysec"'; the "Redis persistence" docs page says the same), and its
  throughput setting short of turning persistence off. RDB snapshots are off
  (``save ""``) so that a background fork does not land in the middle of a run; AOF rewrites
  stay at their defaults (``auto-aof-rewrite-percentage 100``, ``min-size 64mb``).
* ``aof-always`` (``--fsync always``): ``appendfsync always`` — the documentation's
  durability setting (redis.conf: "fsync after every write to the append only log. Slow,
  Safest."). Not run by default.

Mapping of the workload matrix:

* partitions = one stream key per partition; record ``i`` goes to key ``i % partitions``;
  each record is ``XADD key * v <value>``.
* produce: one redis-py connection, pipelines of 1000 XADDs per round trip
  (``pipeline(transaction=False)``); ack latency = the pipeline's build + round trip time.
* acks: Redis answers an XADD once the primary applied it in memory (and wrote it to the AOF
  buffer, fsynced within a second). acks=1 = that reply. acks=all on one node = the same (no
  replicas; the row's note says so). With rf=3 (1 primary + 2 replicas, asynchronous
  replication) acks=all adds ``WAIT 2 5000`` after each pipeline: the reply comes once both
  replicas acknowledged the stream so far — WAIT is not durability (replicas fsync on their own
  schedule, and a failover may still lose acknowledged writes: see the WAIT command's docs).
* consume: XREAD COUNT 5000 over all keys from ``0``, until the produce-max acks=1 keys are read.
* produce-fixed / e2e: 10 MB/s in pipelines of 10 records (1 ms of data); e2e values carry
  :func:`stamp` and a consumer in another process (this file, ``--e2e-consumer``) does
  XREAD BLOCK on the primary and records :func:`age_ns` on arrival. Redis has no read gate on
  replication: with rf=3 acks=all the consumer may see a record before WAIT returns.
* native rows: ``redis-benchmark -P 1000 -c 1 -n N XADD key * v <value>`` (one connection,
  1000 pipelined commands) for produce-max p=1 acks=1, client="redis-benchmark".
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parents[1]
# Run as a script, this folder is sys.path[0] and this file would shadow the redis package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import argparse  # noqa: E402
import gc  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import numpy as np  # noqa: E402
import redis  # noqa: E402

from bench.peers.common import (  # noqa: E402
    FIXED_RATE_SECONDS,
    Row,
    Workload,
    age_ns,
    append_row,
    e2e_consumer_process,
    ensure_apt,
    payload_pool,
    percentiles_ms,
    record_count,
    selected,
    stamp,
    warm_page_cache,
    workloads,
)
from headwater.dev.procs import ChildProcess, free_port, wait_until  # noqa: E402

SYSTEM = "redis"
CLIENT = "python redis-py"
NATIVE = "redis-benchmark"
PIPELINE = 1000
FIXED_BATCH = 10
XREAD_COUNT = 5000
WAIT_TIMEOUT_MS = 5000


def ensure_installed() -> None:
    ensure_apt(("redis-server", "redis-benchmark"), ("redis-server", "redis-tools"))


def _node(name: str, data: Path, port: int, fsync: str, primary: int | None) -> ChildProcess:
    d = data / name
    d.mkdir(parents=True, exist_ok=True)
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d)]
    argv += ["--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--daemonize", "no"]
    argv += ["--protected-mode", "no"]
    if primary is not None:
        argv += ["--replicaof", "127.0.0.1", str(primary)]
    return ChildProcess(name, argv, data / f"{name}.log")


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.RedisError:
        return False


@contextmanager
def cluster(data: Path, replicas: int, fsync: str) -> Iterator[int]:
    """A primary (and ``replicas`` replicas of it); yields the primary's port."""
    port = free_port()
    nodes = [_node("primary", data, port, fsync, None)]
    nodes += [_node(f"replica{i}", data, free_port(), fsync, port) for i in range(replicas)]
    try:
        for n in nodes:
            n.start()
        wait_until(lambda: _pings(port), timeout=20, what="redis primary", watch=nodes)
        if replicas:
            r = redis.Redis(port=port)
            wait_until(
                lambda: sum(
                    1
                    for k, v in r.info("replication").items()
                    if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
                )
                == replicas,
                timeout=30,
                what=f"{replicas} online replicas",
                watch=nodes,
            )
        yield port
    finally:
        for n in reversed(nodes):
            n.stop()


def _keys(w: Workload) -> list[str]:
    return [f"t-{w.partitions}-{w.record_size}-{w.acks}-{w.rf}-{i}" for i in range(w.partitions)]


def produce_max(r: redis.Redis, w: Workload, n: int, max_s: float) -> tuple[int, float, list[int]]:
    keys, pool = _keys(w), payload_pool(w.record_size)
    p, npool = len(keys), len(pool)
    wait = w.acks == "all" and w.rf > 1
    pipe = r.pipeline(transaction=False)
    sent, lat, short = 0, [], 0
    t0 = time.monotonic()
    while sent < n and time.monotonic() - t0 < max_s:
        ts = time.monotonic_ns()
        b = min(PIPELINE, n - sent)
        for i in range(sent, sent + b):
            pipe.xadd(keys[i % p], {"v": pool[i % npool]})
        if wait:
            pipe.execute_command("WAIT", w.rf - 1, WAIT_TIMEOUT_MS)
        out = pipe.execute()
        lat.append(time.monotonic_ns() - ts)
        if wait and out[-1] < w.rf - 1:
            short += 1  # WAIT timed out before every replica acknowledged
        sent += b
    if short:
        print(f"redis: WAIT fell short in {short} pipelines of {w.key}", file=sys.stderr)
    return sent, time.monotonic() - t0, lat


def consume(r: redis.Redis, w: Workload, expected: int, max_s: float) -> tuple[int, float, int]:
    last: dict[str, str | bytes] = {k: "0" for k in _keys(w)}
    got = nbytes = 0
    t0 = time.monotonic()
    while got < expected and time.monotonic() - t0 < max_s:
        resp = r.xread(last, count=XREAD_COUNT)  # type: ignore[arg-type]
        if not resp:
            break
        for key, entries in resp:
            got += len(entries)
            nbytes += sum(len(fields[b"v"]) for _, fields in entries)
            last[key.decode()] = entries[-1][0]
    return got, time.monotonic() - t0, nbytes


def produce_paced(
    r: redis.Redis, w: Workload, key: str, seconds: float, *, stamped: bool
) -> tuple[int, float, list[int]]:
    """``w.rate_mb_s`` into ``key`` for ``seconds``; per-record ack latencies (ns)."""
    pool = payload_pool(w.record_size)
    wait = w.acks == "all" and w.rf > 1
    per_batch_s = FIXED_BATCH * w.record_size / (w.rate_mb_s or 10) / 1e6
    pipe = r.pipeline(transaction=False)
    sent, lat = 0, []
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        due = t0 + (sent // FIXED_BATCH) * per_batch_s
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        starts = []
        for i in range(sent, sent + FIXED_BATCH):
            starts.append(time.monotonic_ns())
            v = pool[i % len(pool)]
            pipe.xadd(key, {"v": stamp(v) if stamped else v})
        if wait:
            pipe.execute_command("WAIT", w.rf - 1, WAIT_TIMEOUT_MS)
        pipe.execute()
        now = time.monotonic_ns()
        lat += [now - s for s in starts]
        sent += FIXED_BATCH
    return sent, time.monotonic() - t0, lat


def e2e_consumer(port: int, key: str, samples_out: Path) -> None:
    """Child process: XREAD BLOCK ``key`` from 0 until the ``end`` entry; save ages (ns)."""
    r = redis.Redis(port=port)
    r.ping()
    gc.freeze()  # no full-collection pauses over startup objects (as bench/peers/headwater.py)
    print("ready", flush=True)
    last: str | bytes = "0"
    ages: list[int] = []
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 30:
        resp = r.xread({key: last}, count=1000, block=1000)
        if not resp:
            continue
        now = time.monotonic_ns()
        idle_since = time.monotonic()
        entries = resp[0][1]
        last = entries[-1][0]
        for _, fields in entries:
            if b"end" in fields:
                np.save(samples_out, np.asarray(ages, dtype=np.int64))
                return
            ages.append(age_ns(fields[b"v"], now))
    raise SystemExit("e2e consumer: no end marker within 30 s of the last record")


def run_e2e(r: redis.Redis, port: int, w: Workload, seconds: float, tmp: Path) -> Row:
    key = f"e2e-{w.acks}-{w.rf}"
    samples = tmp / f"{key}.npy"
    argv = [sys.executable, __file__, "--e2e-consumer", str(port), key, str(samples)]
    with e2e_consumer_process(argv, exit_timeout=60):
        gc.freeze()
        sent, secs, _ = produce_paced(r, w, key, seconds, stamped=True)
        r.xadd(key, {"end": "1"})
    ages = np.load(samples)
    note = "consumer: XREAD BLOCK in another process; pipelines of 10 records at 10 MB/s"
    if w.rf > 1:
        note += "; producer WAITs for 2 replicas, reads on the primary do not wait for them"
    return Row.of(
        SYSTEM,
        CLIENT,
        w,
        len(ages),
        secs,
        latency_ms=percentiles_ms(ages),
        note=note,
        extra={"sent": sent},
    )


def native_produce(port: int, w: Workload, n: int, max_s: float) -> Row | None:
    value = payload_pool(w.record_size)[0].decode()
    key = f"native-{w.record_size}"
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "1", "-P", str(PIPELINE)]
    argv += ["-n", str(n), "--csv", "XADD", key, "*", "v", value]
    t0 = time.monotonic()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=max_s * 4 + 30)
    except subprocess.TimeoutExpired:
        print("redis-benchmark: timed out, no native row", file=sys.stderr)
        return None
    secs = time.monotonic() - t0
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith('"XADD')]
    if out.returncode != 0 or not lines:
        print(f"redis-benchmark failed: {out.stderr[-500:]}", file=sys.stderr)
        return None
    redis.Redis(port=port).delete(key)
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
    # "p99_latency_ms","max_latency_ms"
    fields = [f.strip('"') for f in lines[-1].split(",")]
    rps = float(fields[1])
    lat = {"p50": float(fields[4]), "p99": float(fields[6]), "max": float(fields[7])}
    row = Row.of(
        SYSTEM,
        NATIVE,
        w,
        n,
        n / rps,
        latency_ms=lat,
        note="redis-benchmark -c 1 -P 1000 XADD (one connection); latency per pipelined command",
        extra={"wall_seconds": secs},
    )
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-rf3", action="store_true")
    ap.add_argument("--max-seconds", type=float, default=30)
    ap.add_argument("--fsync", choices=("everysec", "always"), default="everysec")
    ap.add_argument("--no-native", action="store_true")
    ap.add_argument("--only", default="", help="run the workloads whose key contains this")
    ap.add_argument("--e2e-consumer", nargs=3, metavar=("PORT", "KEY", "SAMPLES"))
    args = ap.parse_args()
    if args.e2e_consumer:
        port, key, samples = args.e2e_consumer
        e2e_consumer(int(port), key, Path(samples))
        return 0
    if args.out is None:
        ap.error("--out is required")
    ensure_installed()
    # a SIGTERM (e.g. from the orchestrator) unwinds through the finally blocks that stop servers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    config = f"aof-{args.fsync}"
    fixed_s = 5 if args.quick else FIXED_RATE_SECONDS
    all_w = [w for w in workloads(include_rf3=not args.no_rf3) if selected(args.only, w.key)]
    produced: dict[tuple[int, int], int] = {}
    failed = 0

    def emit(row: Row) -> None:
        row.config = config
        append_row(args.out, row)
        lat = f" p99 {row.latency_ms['p99']:.2f} ms" if row.latency_ms else ""
        print(
            f"redis {row.client:16} {row.workload:42} {row.records_per_sec:12,.0f} rec/s "
            f"{row.mb_per_sec:8.1f} MB/s{lat}",
            flush=True,
        )

    with tempfile.TemporaryDirectory(prefix="hw-bench-redis-") as tmp:
        for rf in sorted({w.rf for w in all_w}):
            rows = [w for w in all_w if w.rf == rf]
            with cluster(Path(tmp) / f"rf{rf}", rf - 1, args.fsync) as port:
                r = redis.Redis(port=port)
                for w in rows:
                    try:
                        n = record_count(w.record_size, args.quick)
                        if w.kind == "produce-max":
                            warm_page_cache()
                            sent, secs, lat = produce_max(r, w, n, args.max_seconds)
                            note = f"{w.partitions} stream key(s); pipelines of {PIPELINE} XADD"
                            note += "; latency = pipeline build + round trip"
                            if w.acks == "all":
                                note += (
                                    "; acks=all: WAIT 2 after each pipeline (not durability)"
                                    if rf > 1
                                    else "; acks=all on one node = acks=1 (no replicas)"
                                )
                            emit(
                                Row.of(
                                    SYSTEM,
                                    CLIENT,
                                    w,
                                    sent,
                                    secs,
                                    latency_ms=percentiles_ms(lat),
                                    note=note,
                                )
                            )
                            if w.acks == "1" and rf == 1:
                                produced[(w.partitions, w.record_size)] = sent  # read by consume
                            else:
                                r.delete(*_keys(w))
                            if (w.partitions, w.acks, rf) == (1, "1", 1) and not args.no_native:
                                warm_page_cache()
                                row = native_produce(port, w, sent, args.max_seconds)
                                if row:
                                    emit(row)
                        elif w.kind == "consume":
                            expected = produced.pop((w.partitions, w.record_size), 0)
                            got, secs, _ = consume(r, w, expected, args.max_seconds)
                            emit(
                                Row.of(
                                    SYSTEM,
                                    CLIENT,
                                    w,
                                    got,
                                    secs,
                                    note=f"XREAD COUNT {XREAD_COUNT} over {w.partitions} key(s)",
                                )
                            )
                            r.delete(*_keys(w))
                        elif w.kind == "produce-fixed":
                            key = "fixed"
                            sent, secs, lat = produce_paced(r, w, key, fixed_s, stamped=False)
                            emit(
                                Row.of(
                                    SYSTEM,
                                    CLIENT,
                                    w,
                                    sent,
                                    secs,
                                    latency_ms=percentiles_ms(lat),
                                    note="pipelines of 10 XADD at 10 MB/s; per-record latency",
                                )
                            )
                            r.delete(key)
                        elif w.kind == "e2e":
                            emit(run_e2e(r, port, w, fixed_s, Path(tmp)))
                        else:
                            print(f"redis: skipping {w.key}: unknown kind", file=sys.stderr)
                    except Exception as e:  # one failed row must not lose the others
                        print(f"redis: {w.key} failed: {e!r}", file=sys.stderr, flush=True)
                        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
