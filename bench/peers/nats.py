"""NATS JetStream on this machine: Debian's nats-server, driven by nats-py (asyncio).

    .venv/bin/python bench/peers/nats.py --out rows.jsonl [--quick] [--no-rf3] [--max-seconds 30]

Installs ``nats-server`` with apt-get when missing (as root; otherwise it prints the command and
exits 2), starts its own servers on 127.0.0.1 (ports from free_port(), a config file and the
JetStream store in a temporary folder), runs :data:`bench.peers.common.WORKLOADS` and stops
every server by PID, even on error.

Configuration (``Row.config`` = ``file-default``): JetStream with file storage (``jetstream {
store_dir }``), everything else at the server's defaults, as the JetStream docs present it
("Configuring JetStream": file storage is the persistent choice; memory storage is not). The
file store writes each message to the OS as it is stored and fsyncs on an interval (2 minutes
by default; Debian's 2.9 server has no ``sync_interval``/``sync: always`` option, which arrived
in 2.10), so a publish ack means "stored (by a quorum with R3)", not "on disk" — the same level
as Kafka's default (no fsync per write). Streams: ``storage: file``, ``retention: limits``, no
limits, ``replicas`` = rf. rf=3 runs a 3-node cluster (``cluster { routes }`` between three
servers on 127.0.0.1, one store each).

Mapping of the workload matrix:

* partitions = one stream per partition (stream ``B<tag>_<i>`` on subject ``bench.<tag>.<i>``);
  record ``i`` goes to partition ``i % partitions``.
* produce: one connection, ``js.publish_async`` with up to 4000 publishes in flight (nats-py's
  default ``publish_async_max_pending``), acks awaited in windows of 1000 (the throughput
  pattern nats-py documents for async publishing); ack latency = from a window's first publish
  to its last ack.
* acks: JetStream always acknowledges a publish once the stream stored it; with R3 once a
  quorum (2 of 3, the leader included) stored it. There is no leader-only ack and no
  all-replicas ack: acks=1 and acks=all are the same publish with R1 (note says so); with R3
  both are the quorum ack (note says so).
* consume: an ordered push consumer per stream (AckNone, DeliverAll, flow control) from the
  start, until the produce-max acks=1 streams are read (with nats-py this delivered ~3x the
  rate of a pull consumer fetching batches of 5000).
* produce-fixed / e2e: 10 MB/s in bursts of 10 async publishes per millisecond; per-record
  latency = publish to ack. e2e values carry :func:`stamp`; a consumer in another process
  (this file, ``--e2e-consumer``) reads with an ordered push consumer and records
  :func:`age_ns` on arrival (JetStream delivers a message only after it is stored, with R3
  after the quorum).
* native rows (client "nats bench"): ``nats bench js pub async`` (Go client, batches of 500
  async publishes) for produce-max p=1 (acks=1 with rf=1, acks=all with rf=3) and
  ``nats bench js ordered`` for consume p=1; the ``nats`` CLI is built once with
  ``go install github.com/nats-io/natscli/nats@v0.5.1`` (Go module proxy) into
  cache_dir('natscli'); ``--no-native`` skips them. These runs are ``record_count()`` messages
  (not cut by ``--max-seconds``).
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parents[1]
# Run as a script, this folder is sys.path[0] and this file would shadow the nats package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import nats  # noqa: E402
import numpy as np  # noqa: E402
from nats.js import api  # noqa: E402

from bench.peers.common import (  # noqa: E402
    FIXED_RATE_SECONDS,
    Row,
    Workload,
    age_ns,
    append_row,
    cache_dir,
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

SYSTEM = "nats"
CLIENT = "python nats-py"
WINDOW = 1000
WINDOWS_IN_FLIGHT = 4
FIXED_BATCH = 10


def ensure_installed() -> None:
    ensure_apt(("nats-server",), ("nats-server",))


def _server_conf(name: str, port: int, store: Path, cluster: tuple[int, list[int]] | None) -> str:
    conf = f'server_name: {name}\nlisten: "127.0.0.1:{port}"\n'
    conf += f'jetstream {{\n  store_dir: "{store}"\n}}\n'
    if cluster:
        cport, all_ports = cluster
        routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in all_ports if p != cport)
        conf += f'cluster {{\n  name: hwbench\n  listen: "127.0.0.1:{cport}"\n'
        conf += f"  routes: [{routes}]\n}}\n"
    return conf


async def _quiet(_e: Exception) -> None:
    pass


async def _js_ready(url: str) -> bool:
    try:
        nc = await nats.connect(url, connect_timeout=1, allow_reconnect=False, error_cb=_quiet)
    except Exception:
        return False
    try:
        await nc.jetstream(timeout=1).account_info()
        return True
    except Exception:
        return False
    finally:
        await nc.close()


@contextmanager
def cluster(data: Path, nodes: int) -> Iterator[str]:
    """``nodes`` nats-servers (a cluster when > 1); yields the first one's URL."""
    ports = [free_port() for _ in range(nodes)]
    cports = [free_port() for _ in range(nodes)] if nodes > 1 else []
    procs = []
    for i in range(nodes):
        conf = data / f"n{i}.conf"
        data.mkdir(parents=True, exist_ok=True)
        conf.write_text(
            _server_conf(
                f"n{i}", ports[i], data / f"js{i}", (cports[i], cports) if nodes > 1 else None
            )
        )
        procs.append(ChildProcess(f"nats{i}", ["nats-server", "-c", str(conf)], data / f"n{i}.log"))
    url = f"nats://127.0.0.1:{ports[0]}"
    try:
        for p in procs:
            p.start()
        wait_until(
            lambda: asyncio.run(_js_ready(url)),
            timeout=60,
            interval=0.5,
            what="JetStream ready",
            watch=procs,
        )
        yield url
    finally:
        for p in reversed(procs):
            p.stop()


def _streams(w: Workload, tag: str | None = None) -> list[tuple[str, str]]:
    tag = tag or f"{w.partitions}_{w.record_size}_{'all' if w.acks == 'all' else '1'}_{w.rf}"
    return [(f"B{tag}_{i}", f"bench.{tag}.{i}") for i in range(w.partitions)]


async def _add_streams(js: object, streams: list[tuple[str, str]], rf: int) -> None:
    for name, subject in streams:
        await js.add_stream(  # type: ignore[attr-defined]
            api.StreamConfig(
                name=name, subjects=[subject], storage=api.StorageType.FILE, num_replicas=rf
            )
        )


async def delete_streams(url: str, streams: list[tuple[str, str]]) -> None:
    """Drop a run's streams once read (keeps the store's disk use to one run or two)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for name, _ in streams:
            await js.delete_stream(name)
    finally:
        await nc.close()


async def produce_max(url: str, w: Workload, n: int, max_s: float) -> tuple[int, float, list[int]]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(publish_async_max_pending=WINDOW * WINDOWS_IN_FLIGHT)
        streams = _streams(w)
        await _add_streams(js, streams, w.rf)
        subjects = [s for _, s in streams]
        pool = payload_pool(w.record_size)
        p, npool = len(subjects), len(pool)
        inflight: deque[list[asyncio.Future[api.PubAck]]] = deque()
        lat: list[int] = []
        sent = 0
        t0 = time.monotonic()
        while sent < n and time.monotonic() - t0 < max_s:
            if len(inflight) >= WINDOWS_IN_FLIGHT - 1:
                await asyncio.gather(*inflight.popleft())
            ts = time.monotonic_ns()
            b = min(WINDOW, n - sent)
            window = [
                await js.publish_async(subjects[i % p], pool[i % npool])
                for i in range(sent, sent + b)
            ]
            window[-1].add_done_callback(lambda _f, ts=ts: lat.append(time.monotonic_ns() - ts))
            inflight.append(window)
            sent += b
        while inflight:
            await asyncio.gather(*inflight.popleft())
        return sent, time.monotonic() - t0, lat
    finally:
        await nc.close()


async def consume(url: str, w: Workload, expected: int, max_s: float) -> tuple[int, float]:
    """An ordered push consumer per stream from the first message (flow control on; nats-py
    delivers to a callback about 3x faster here than pull ``fetch`` batches)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        t0 = time.monotonic()

        async def one(stream: str, subject: str) -> int:
            total = (await js.stream_info(stream)).state.messages
            got = 0
            done = asyncio.Event()

            async def on_msg(msg: object) -> None:
                nonlocal got
                got += 1
                if got >= total:
                    done.set()

            sub = await js.subscribe(subject, cb=on_msg, ordered_consumer=True)
            if total:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), max(0.0, t0 + max_s - time.monotonic()))
            await sub.unsubscribe()
            return got

        counts = await asyncio.gather(*(one(s, subj) for s, subj in _streams(w)))
        secs = time.monotonic() - t0
        if sum(counts) < expected and secs < max_s:
            print(f"nats consume: read {sum(counts)} of {expected}", file=sys.stderr)
        return sum(counts), secs
    finally:
        await nc.close()


async def produce_paced(
    url: str, w: Workload, seconds: float, *, stamped: bool, tag: str, create: bool = True
) -> tuple[int, float, list[int]]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        streams = _streams(w, tag)
        if create:
            await _add_streams(js, streams, w.rf)
        subject = streams[0][1]
        pool = payload_pool(w.record_size)
        per_batch_s = FIXED_BATCH * w.record_size / (w.rate_mb_s or 10) / 1e6
        lat: list[int] = []
        pending: list[asyncio.Future[api.PubAck]] = []
        sent = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            delay = t0 + (sent // FIXED_BATCH) * per_batch_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            for i in range(sent, sent + FIXED_BATCH):
                v = pool[i % len(pool)]
                ts = time.monotonic_ns()
                f = await js.publish_async(subject, stamp(v) if stamped else v)
                f.add_done_callback(lambda _f, ts=ts: lat.append(time.monotonic_ns() - ts))
                pending.append(f)
            if len(pending) > 2000:
                await asyncio.gather(*pending[:1000])
                del pending[:1000]
            sent += FIXED_BATCH
        await asyncio.gather(*pending)
        secs = time.monotonic() - t0
        if stamped:
            await js.publish(subject, b"end")
        return sent, secs, lat
    finally:
        await nc.close()


async def _e2e_consume(url: str, subject: str, samples_out: Path) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    ages: list[int] = []
    done = asyncio.Event()

    async def on_msg(msg: object) -> None:
        data = msg.data  # type: ignore[attr-defined]
        if data == b"end":
            done.set()
        else:
            ages.append(age_ns(data))

    await js.subscribe(subject, cb=on_msg, ordered_consumer=True)
    await nc.flush()
    gc.freeze()  # no full-collection pauses over startup objects (as bench/peers/headwater.py)
    print("ready", flush=True)
    try:
        await asyncio.wait_for(done.wait(), FIXED_RATE_SECONDS * 3 + 60)
    finally:
        np.save(samples_out, np.asarray(ages, dtype=np.int64))
        await nc.close()


def run_e2e(url: str, w: Workload, seconds: float, tmp: Path) -> Row:
    tag = f"e2e_{w.acks}_{w.rf}"
    stream, subject = _streams(w, tag)[0]
    samples = tmp / f"{tag}.npy"

    async def create() -> None:
        nc = await nats.connect(url)
        await _add_streams(nc.jetstream(), [(stream, subject)], w.rf)
        await nc.close()

    asyncio.run(create())
    argv = [sys.executable, __file__, "--e2e-consumer", url, subject, str(samples)]
    with e2e_consumer_process(argv, exit_timeout=120):
        gc.freeze()
        sent, secs, _ = asyncio.run(
            produce_paced(url, w, seconds, stamped=True, tag=tag, create=False)
        )
    ages = np.load(samples)
    note = "ordered push consumer in another process; 10 async publishes per ms at 10 MB/s"
    if w.rf > 1:
        note += "; R3 stream: delivered after the quorum stored it"
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


NATSCLI_VERSION = "v0.5.1"
NATIVE = "nats bench"


def natscli() -> Path | None:
    """The ``nats`` CLI (for ``nats bench``), built once from the Go module proxy into
    cache_dir('natscli'); None (and why) when there is no Go toolchain or the build fails."""
    exe = cache_dir("natscli") / "nats"
    if exe.exists():
        return exe
    if not shutil.which("go"):
        print("nats bench rows skipped: no Go toolchain to build natscli", file=sys.stderr)
        return None
    pkg = f"github.com/nats-io/natscli/nats@{NATSCLI_VERSION}"
    print(f"building {pkg} (GOFLAGS=-p=1, nice)", file=sys.stderr, flush=True)
    env = dict(os.environ, GOBIN=str(exe.parent), GOFLAGS="-p=1")
    r = subprocess.run(["nice", "-n", "10", "go", "install", pkg], env=env, check=False)
    if r.returncode != 0 or not exe.exists():
        print("nats bench rows skipped: natscli build failed", file=sys.stderr)
        return None
    return exe


def _bench_csv(exe: Path, url: str, argv: list[str], timeout: float) -> dict[str, str] | None:
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        cmd = [str(exe), "-s", url, "bench", "js", *argv, "--no-progress", "--csv", f.name]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"nats bench timed out: {' '.join(argv[:2])}", file=sys.stderr)
            return None
        lines = [ln for ln in Path(f.name).read_text().splitlines() if ln.strip()]
    if r.returncode != 0 or len(lines) < 2:
        print(f"nats bench failed: {r.stderr[-500:]}", file=sys.stderr)
        return None
    return dict(zip(lines[0].lstrip("#").split(","), lines[1].split(","), strict=False))


def native_rows(exe: Path, url: str, w: Workload, n: int, max_s: float) -> list[Row]:
    """``nats bench js pub async`` into a fresh R``rf`` file stream (default batch of 500
    async publishes) and, for rf=1, ``nats bench js ordered`` reading it back."""
    stream, subject = f"native_{w.record_size}_{w.acks}_{w.rf}", f"native.{w.record_size}"
    size, timeout = f"{w.record_size}B", max_s * 4 + 60
    pub = ["pub", "async", subject, "--create", "--stream", stream, "--storage", "file"]
    pub += ["--replicas", str(w.rf), "--maxbytes", "8GB", "--msgs", str(n), "--size", size]
    got = _bench_csv(exe, url, pub, timeout)
    if got is None:
        return []
    lat = {
        k: float(got[f"{c}LatencyMicroSecs"]) / 1000
        for k, c in (("p50", "P50"), ("p99", "P99"), ("p999", "P99.9"), ("max", "Max"))
    }
    note = "nats bench js pub async (batch 500), file stream R" + f"{w.rf}; {_acks_note(w)}"
    rows = [Row.of(SYSTEM, NATIVE, w, n, float(got["DurationSecs"]), latency_ms=lat, note=note)]
    if w.rf == 1 and w.acks == "1":
        cw = Workload("consume", w.partitions, w.record_size, "1", 1)
        ordered = ["ordered", "--stream", stream, "--msgs", str(n), "--size", size]
        got = _bench_csv(exe, url, ordered, timeout)
        if got is not None:
            note = "nats bench js ordered (ephemeral ordered consumer)"
            rows.append(Row.of(SYSTEM, NATIVE, cw, n, float(got["DurationSecs"]), note=note))
    asyncio.run(delete_streams(url, [(stream, subject)]))
    return rows


def _acks_note(w: Workload) -> str:
    if w.rf == 1:
        return "acks: publish ack after the R1 stream stored it" + (
            "; acks=all on one node = acks=1" if w.acks == "all" else ""
        )
    return "acks: JetStream acks after a quorum (2 of 3) stored it, for acks=1 and acks=all alike"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-rf3", action="store_true")
    ap.add_argument("--max-seconds", type=float, default=30)
    ap.add_argument("--no-native", action="store_true", help="skip the nats bench rows")
    ap.add_argument("--only", default="", help="run the workloads whose key contains this")
    ap.add_argument("--e2e-consumer", nargs=3, metavar=("URL", "SUBJECT", "SAMPLES"))
    args = ap.parse_args()
    if args.e2e_consumer:
        url, subject, samples = args.e2e_consumer
        asyncio.run(_e2e_consume(url, subject, Path(samples)))
        return 0
    if args.out is None:
        ap.error("--out is required")
    ensure_installed()
    # a SIGTERM (e.g. from the orchestrator) unwinds through the finally blocks that stop servers
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    fixed_s = 5 if args.quick else FIXED_RATE_SECONDS
    exe = None if args.no_native else natscli()
    all_w = [w for w in workloads(include_rf3=not args.no_rf3) if selected(args.only, w.key)]
    produced: dict[tuple[int, int], int] = {}
    failed = 0

    def emit(row: Row) -> None:
        row.config = "file-default"
        append_row(args.out, row)
        lat = f" p99 {row.latency_ms['p99']:.2f} ms" if row.latency_ms else ""
        print(
            f"nats {row.client:16} {row.workload:42} {row.records_per_sec:12,.0f} rec/s "
            f"{row.mb_per_sec:8.1f} MB/s{lat}",
            flush=True,
        )

    with tempfile.TemporaryDirectory(prefix="hw-bench-nats-") as tmp:
        for rf in sorted({w.rf for w in all_w}):
            with cluster(Path(tmp) / f"rf{rf}", rf) as url:
                for w in (w for w in all_w if w.rf == rf):
                    try:
                        n = record_count(w.record_size, args.quick)
                        if w.kind == "produce-max":
                            warm_page_cache()
                            sent, secs, lat = asyncio.run(produce_max(url, w, n, args.max_seconds))
                            note = (
                                f"{w.partitions} stream(s) R{rf}, file storage; publish_async, "
                                f"{WINDOW * WINDOWS_IN_FLIGHT} in flight; latency per window of "
                                f"{WINDOW}; {_acks_note(w)}"
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
                                asyncio.run(delete_streams(url, _streams(w)))
                            if exe and w.partitions == 1 and w.acks == ("1" if rf == 1 else "all"):
                                for row in native_rows(exe, url, w, n, args.max_seconds):
                                    emit(row)
                        elif w.kind == "consume":
                            expected = produced.pop((w.partitions, w.record_size), 0)
                            got, secs = asyncio.run(consume(url, w, expected, args.max_seconds))
                            note = "ordered push consumer per stream (AckNone), from the start"
                            emit(Row.of(SYSTEM, CLIENT, w, got, secs, note=note))
                            asyncio.run(delete_streams(url, _streams(w)))
                        elif w.kind == "produce-fixed":
                            sent, secs, lat = asyncio.run(
                                produce_paced(url, w, fixed_s, stamped=False, tag="fixed")
                            )
                            note = "10 async publishes per ms at 10 MB/s; per-record publish-to-ack"
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
                        elif w.kind == "e2e":
                            emit(run_e2e(url, w, fixed_s, Path(tmp)))
                        else:
                            print(f"nats: skipping {w.key}: unknown kind", file=sys.stderr)
                    except Exception as e:  # one failed row must not lose the others
                        print(f"nats: {w.key} failed: {e!r}", file=sys.stderr, flush=True)
                        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
