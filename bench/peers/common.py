"""What every peer harness shares: the workload matrix, the result row, e2e timestamps.

Each system has one module here (``headwater.py``, ``kafka.py``, ``nats.py``, ``redis.py``)
that starts the system itself on 127.0.0.1 (ports picked at run time, data in a temporary
folder), runs :data:`WORKLOADS` that it supports, stops every process by PID and appends one
JSON line per measurement (:class:`Row`) to the file named by ``--out``. ``bench/side_by_side.py``
runs them in one go with the machine's ceilings and prints the table of ratios.

Workload shape (the same for every system):

* ``produce-max``: one producer, as fast as it goes, ``records`` records of ``record_size``
  bytes into one topic/stream of ``partitions`` partitions; figure = records/s and MB/s
  (MB = 10**6 bytes of record values), plus ack latency percentiles when the tool reports them.
* ``produce-fixed``: one producer at ``rate_mb_s`` (10 MB/s); figure = ack latency p50/p99/p99.9.
* ``consume``: one consumer reading the ``produce-max`` topic from the start; figure = MB/s.
* ``e2e``: a producer at ``rate_mb_s`` and a consumer in another process; each value starts
  with :func:`stamp` (CLOCK_MONOTONIC nanoseconds, system-wide on Linux); figure = p50/p99/p99.9
  of consumer receive time minus stamp.

Every ``produce-max`` row of every system starts with :func:`warm_page_cache`: the harness
writes and deletes ``$HEADWATER_BENCH_WARM_MIB`` MiB (default 2048; ``bench/side_by_side.py
--warm-mib``), so each row's writes land in pages the kernel freed a moment before, whatever
the system's earlier rows wrote.

``acks``: "1" = the leader has it (Kafka acks=1; JetStream/Redis: the server acknowledged),
"all" = every in-sync replica has it. ``rf``: replicas. A system maps partitions to what it has
(JetStream: one stream per partition; Redis: one stream key per partition) and says so in
``note``.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

MB = 1_000_000
STAMP = struct.Struct("<q")


@dataclass(frozen=True)
class Workload:
    kind: str  # produce-max | produce-fixed | consume | e2e
    partitions: int
    record_size: int
    acks: str = "1"  # "1" | "all"
    rf: int = 1
    rate_mb_s: float | None = None

    @property
    def key(self) -> str:
        rate = f" @{self.rate_mb_s:g}MB/s" if self.rate_mb_s else ""
        return (
            f"{self.kind} p={self.partitions} {self.record_size}B acks={self.acks} "
            f"rf={self.rf}{rate}"
        )


def selected(only: str, key: str) -> bool:
    """``--only``: a workload is run when its key contains any of the comma-separated parts
    (``"produce-max,consume"``); an empty ``only`` selects every workload."""
    return not only or any(part in key for part in only.split(","))


def workloads(include_rf3: bool = True) -> list[Workload]:
    """The matrix, in run order (consume rows follow the produce-max row they read)."""
    out: list[Workload] = []
    for rf in (1, 3) if include_rf3 else (1,):
        for partitions in (1, 8):
            for size in (100, 1024):
                for acks in ("1", "all"):
                    if rf == 3 and (size == 100 or partitions == 8):
                        continue  # RF=3 rows: 1 KiB, 1 partition, both acks
                    out.append(Workload("produce-max", partitions, size, acks, rf))
                if rf == 1:
                    out.append(Workload("consume", partitions, size, "1", rf))
    out.append(Workload("produce-fixed", 1, 1024, "1", 1, rate_mb_s=10))
    out.append(Workload("e2e", 1, 1024, "1", 1, rate_mb_s=10))
    if include_rf3:
        out.append(Workload("e2e", 1, 1024, "all", 3, rate_mb_s=10))
    return out


WORKLOADS = workloads()


def record_count(size: int, quick: bool = False) -> int:
    """Records per throughput run: ~300 MB of 100 B values, ~1 GB of 1 KiB (1/20 with quick)."""
    n = 3_000_000 if size <= 100 else 1_000_000
    return n // 20 if quick else n


FIXED_RATE_SECONDS = 20  # produce-fixed and e2e run this long (5 with --quick)


@dataclass
class Row:
    system: str  # headwater | kafka | nats | redis
    client: str  # e.g. "java perf-test", "python confluent-kafka", "python headwater"
    workload: str  # Workload.key
    kind: str
    partitions: int
    record_size: int
    acks: str
    rf: int
    records: int
    seconds: float
    records_per_sec: float
    mb_per_sec: float
    latency_ms: dict[str, float] | None = None  # {"p50":…, "p99":…, "p999":…}
    rate_mb_s: float | None = None
    config: str = ""  # which documented configuration (see the module's docstring)
    note: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    @classmethod
    def of(
        cls, system: str, client: str, w: Workload, records: int, seconds: float, **kw: object
    ) -> Row:
        return cls(
            system=system,
            client=client,
            workload=w.key,
            kind=w.kind,
            partitions=w.partitions,
            record_size=w.record_size,
            acks=w.acks,
            rf=w.rf,
            records=records,
            seconds=seconds,
            records_per_sec=records / seconds if seconds else 0.0,
            mb_per_sec=records * w.record_size / MB / seconds if seconds else 0.0,
            rate_mb_s=w.rate_mb_s,
            **kw,  # type: ignore[arg-type]
        )


def append_row(out: Path, row: Row) -> None:
    with open(out, "a") as f:
        f.write(json.dumps(asdict(row)) + "\n")


def read_rows(path: Path) -> list[Row]:
    return [Row(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def percentiles_ms(samples_ns: np.ndarray | list[int]) -> dict[str, float]:
    a = np.asarray(samples_ns, dtype=np.float64) / 1e6
    if a.size == 0:
        return {}
    p50, p99, p999 = np.percentile(a, [50, 99, 99.9])
    return {"p50": float(p50), "p99": float(p99), "p999": float(p999), "max": float(a.max())}


def payload_pool(size: int, n: int = 1000) -> list[bytes]:
    """``n`` random printable values of ``size`` bytes, made before any clock starts."""
    rng = np.random.default_rng(42)
    raw = rng.integers(65, 91, size=(n, size), dtype=np.uint8)
    return [bytes(r) for r in raw]


def stamp(value: bytes) -> bytes:
    """``value`` with its first 8 bytes replaced by now (CLOCK_MONOTONIC ns)."""
    return STAMP.pack(time.monotonic_ns()) + value[STAMP.size :]


def age_ns(value: bytes | memoryview, now_ns: int | None = None) -> int:
    """Nanoseconds since :func:`stamp` wrote ``value``'s first 8 bytes."""
    (t,) = STAMP.unpack_from(value, 0)
    return (time.monotonic_ns() if now_ns is None else now_ns) - int(t)


class Pacer:
    """Paces a producer to ``rate`` units per second: ``await``/``wait(n)`` before sending n."""

    def __init__(self, rate_per_s: float) -> None:
        self.rate = rate_per_s
        self.start = time.monotonic()
        self.sent = 0.0

    def delay(self, n: float) -> float:
        """Seconds to wait before sending ``n`` more units (0 when behind schedule)."""
        self.sent += n
        return max(0.0, self.start + self.sent / self.rate - time.monotonic())

    def wait(self, n: float) -> None:
        d = self.delay(n)
        if d > 0:
            time.sleep(d)


#: environment variable: MiB :func:`warm_page_cache` writes and deletes (0: none)
WARM_MIB_ENV = "HEADWATER_BENCH_WARM_MIB"
DEFAULT_WARM_MIB = 2048


def warm_page_cache(directory: Path | None = None) -> float:
    """Write ``$HEADWATER_BENCH_WARM_MIB`` MiB (default 2048) to a scratch file in
    ``directory`` (default: the temporary directory, the file system the systems' data
    folders are on), delete it, and return the seconds it took. Every ``produce-max`` row of
    every peer calls it before its clock starts.

    Why: a VM that hands freed guest memory back to its host (free page reporting, as this
    machine kind does) charges a host fault for each page touched for the first time since;
    a log writer then gets ~0.4 GB/s from the page cache against ~3 GB/s from pages the kernel
    freed a moment ago (bench/fresh_pages.py). A harness call's rows run one after another,
    each writing up to ~1 GB, so without this a row's rate depended on how many GB its own
    system's earlier rows had written: Headwater's per-record rows ran third and fourth
    (after ``send_many`` and the awaited ``send()``), confluent-kafka's second after the Java
    tool (docs/benchmarks.md, "Session 31"). The file is deleted before writeback starts, so
    nothing reaches the disk."""
    mib = int(os.environ.get(WARM_MIB_ENV, DEFAULT_WARM_MIB))
    if mib <= 0:
        return 0.0
    t0 = time.monotonic()
    chunk = b"\x5a" * (1 << 20)
    fd, name = tempfile.mkstemp(prefix="hw-warm-", dir=directory)
    try:
        for _ in range(mib):
            os.write(fd, chunk)
    finally:
        os.close(fd)
        os.unlink(name)
    return time.monotonic() - t0


def cache_dir(name: str) -> Path:
    """Where downloaded peer binaries live between runs (~/.cache/headwater-bench/<name>)."""
    base = Path(os.environ.get("HEADWATER_BENCH_CACHE", Path.home() / ".cache" / "headwater-bench"))
    d = base / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def ensure_apt(binaries: tuple[str, ...], packages: tuple[str, ...]) -> None:
    """Install Debian ``packages`` when one of ``binaries`` is missing (as root; otherwise print
    the command and exit 2)."""
    if all(shutil.which(b) for b in binaries):
        return
    cmd = f"apt-get update && apt-get install -y {' '.join(packages)}"
    if os.geteuid() != 0:
        print(f"{binaries[0]} is missing; install it with: sudo sh -c '{cmd}'", file=sys.stderr)
        sys.exit(2)
    print(f"installing: {cmd}", file=sys.stderr, flush=True)
    subprocess.run(["sh", "-c", cmd], check=True, stdout=subprocess.DEVNULL)


@contextmanager
def e2e_consumer_process(argv: list[str], exit_timeout: float) -> Iterator[None]:
    """Run an e2e consumer process (``argv``), wait for its ``ready`` line, yield while the
    caller produces, then wait ``exit_timeout`` s for it to exit 0; killed by PID on any error."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != b"ready":
            raise RuntimeError("e2e consumer did not start")
        yield
        if child.wait(exit_timeout) != 0:
            raise RuntimeError(f"e2e consumer exited {child.returncode}")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
