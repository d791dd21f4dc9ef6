"""Transactions under broker and client hard/clean bounces (Kafka's transactions_test shape).

A copier process (tests/txn/copier.py) reads an input topic and writes an output topic
transactionally, committing its input offsets inside each transaction. While it runs, the test
kill -9s and restarts it (hard client bounce), SIGTERMs and restarts it (clean client bounce),
kill -9s and restarts a broker (hard broker bounce) and restarts another with SIGTERM (clean
broker bounce). A read_committed consumer reads the output concurrently the whole time.

Checked at the end:

* output set == input set with 0 duplicates, in the read_committed view at the end and in what
  the concurrent read_committed consumer saw;
* 0 aborted reads: the read_uncommitted view holds records of aborted transactions (the copier
  also aborts every 7th transaction on purpose, so aborts certainly happen), and none of those
  transactions' records was read by a read_committed consumer;
* nothing visible before its commit: every record the concurrent consumer read belongs to a
  transaction whose commit had started (its line in the copier's log) before it was read.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.client import (
    AsyncAdminClient,
    AsyncConsumer,
    AsyncProducer,
    NewTopic,
    TopicPartition,
)
from headwater.dev.cluster import LocalCluster
from tests.helpers.wait import async_wait_for, wait_for

pytestmark = pytest.mark.slow

N = 3000
PARTITIONS = 3
INPUT, OUTPUT, GROUP, TXN_ID = "txn-in", "txn-out", "txn-copier", "copier-1"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("txn-bounces"),
        brokers=3,
        controllers=1,
        coordinators=2,
        etcd_unsafe_no_fsync=True,
    ) as c:
        yield c


class Copier:
    """The copier process, restarted across bounces; each incarnation logs to its own file."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.txn_log = workdir / "commits.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnations = 0
        self.exit_codes: list[int] = []

    def start(self) -> None:
        self.incarnations += 1
        out = open(self.workdir / f"copier-{self.incarnations}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "tests.txn.copier",
                "--bootstrap", self.cluster.bootstrap_servers, "--input", INPUT, "--output", OUTPUT,
                "--partitions", str(PARTITIONS), "--group", GROUP,
                "--transactional-id", TXN_ID, "--log", str(self.txn_log), "--abort-every", "7",
            ],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        out.close()

    def stop(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        code = self.proc.wait(timeout=60)
        self.exit_codes.append(code)
        self.proc = None

    def commit_starts(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.txn_log.exists():
            for line in self.txn_log.read_text().splitlines():
                txn, _, ts = line.partition(" ")
                if ts:
                    out[txn] = float(ts)
        return out


class ConcurrentReader:
    """A read_committed consumer of the output on its own thread and loop; records
    (value, txn, wall time read) for everything it reads."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.seen: list[tuple[bytes, str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "concurrent reader did not stop"

    async def _run(self) -> None:
        try:
            async with AsyncConsumer(
                self.bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
            ) as c:
                c.assign([TopicPartition(OUTPUT, p) for p in range(PARTITIONS)])
                while not self._stop.is_set():
                    for r in await c.poll(timeout_ms=200, max_records=1000):
                        now = time.time()
                        assert r.value is not None
                        self.seen.append((r.value, dict(r.headers)["txn"].decode(), now))  # type: ignore[union-attr]
        except BaseException as exc:  # surfaced by the test
            self.error = exc


async def _setup(bootstrap: str) -> None:
    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics(
            [
                NewTopic(INPUT, PARTITIONS, 3, {"min.insync.replicas": "2"}),
                NewTopic(OUTPUT, PARTITIONS, 3, {"min.insync.replicas": "2"}),
            ]
        )
    async with AsyncProducer(bootstrap) as p:
        futures = [
            await p.send(INPUT, f"v{i:05d}".encode(), f"k{i}".encode(), partition=i % PARTITIONS)
            for i in range(N)
        ]
        await asyncio.gather(*futures)


async def _read_all(bootstrap: str, isolation: str) -> list[tuple[bytes, str]]:
    """Every record of the output in the given isolation level, up to its end (LSO / HW)."""
    tps = [TopicPartition(OUTPUT, p) for p in range(PARTITIONS)]
    async with AsyncConsumer(
        bootstrap, isolation_level=isolation, auto_offset_reset="earliest"
    ) as c:
        c.assign(tps)
        ends = await c.end_offsets(tps)
        got: list[tuple[bytes, str]] = []
        deadline = time.monotonic() + 60
        while any([await c.position(tp) < ends[tp] for tp in tps]):
            assert time.monotonic() < deadline, "could not read the output to its end"
            for r in await c.poll(timeout_ms=300, max_records=5000):
                assert r.value is not None
                got.append((r.value, dict(r.headers)["txn"].decode()))  # type: ignore[union-attr]
        return got


def _leader_of(cluster: LocalCluster, topic: str, partition: int) -> int:
    """The partition's leader, waiting until metadata knows the topic and a leader."""

    async def leader() -> int | None:
        async with AsyncAdminClient(cluster.bootstrap) as admin:
            (desc,) = await admin.describe_topics([topic])
            lead = int(desc.partitions[partition].leader)
            return lead if lead > 0 else None

    return asyncio.run(async_wait_for(leader, timeout=60, what=f"a leader of {topic}-{partition}"))


def test_copier_exactly_once_under_client_and_broker_bounces(
    tcluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = tcluster.bootstrap
    asyncio.run(_setup(bootstrap))
    copier = Copier(tcluster, tmp_path)
    reader = ConcurrentReader(tcluster.bootstrap_servers)
    reader.start()
    copier.start()
    try:

        def progressed(frac: float) -> bool:
            return len(reader.seen) >= frac * N

        wait_for(lambda: progressed(0.15), timeout=120, what="15% copied")
        copier.stop(signal.SIGKILL)  # hard client bounce
        copier.start()
        wait_for(lambda: progressed(0.35), timeout=120, what="35% copied")
        copier.stop(signal.SIGTERM)  # clean client bounce
        copier.start()
        wait_for(lambda: progressed(0.5), timeout=120, what="50% copied")
        victim = _leader_of(tcluster, OUTPUT, 0)
        tcluster.kill_broker(victim)  # hard broker bounce
        wait_for(lambda: progressed(0.65), timeout=120, what="65% copied, a broker down")
        tcluster.restart_broker(victim)
        other = _leader_of(tcluster, OUTPUT, 1)
        tcluster.stop_broker(other)  # clean broker bounce
        tcluster.restart_broker(other)
        wait_for(lambda: progressed(1.0), timeout=180, what="every record copied")
        copier.stop(signal.SIGTERM)
    finally:
        if copier.proc is not None:
            copier.stop(signal.SIGKILL)
        reader.stop()
    assert reader.error is None, f"concurrent reader failed: {reader.error!r}"
    assert copier.exit_codes[-1] == 0, f"copier exits {copier.exit_codes}"

    expected = {f"v{i:05d}".encode() for i in range(N)}
    bootstrap = tcluster.bootstrap_servers  # brokers were restarted on new ports
    committed = asyncio.run(_read_all(bootstrap, "read_committed"))
    counts = Counter(v for v, _ in committed)
    assert {v for v, n in counts.items() if n > 1} == set(), "duplicates in read_committed"
    assert set(counts) == expected, f"missing {len(expected - set(counts))} records"

    seen_counts = Counter(v for v, _, _ in reader.seen)
    assert {v for v, n in seen_counts.items() if n > 1} == set(), "concurrent reader duplicates"
    assert set(seen_counts) == expected

    uncommitted = asyncio.run(_read_all(bootstrap, "read_uncommitted"))
    committed_txns = {t for _, t in committed}
    aborted_txns = {t for _, t in uncommitted} - committed_txns
    assert aborted_txns, "no transaction was aborted: the test proved nothing"
    read_aborted = [v for v, t, _ in reader.seen if t in aborted_txns]
    assert read_aborted == [], f"{len(read_aborted)} aborted records read by read_committed"

    starts = copier.commit_starts()
    early = [(t, ts) for _, t, ts in reader.seen if t not in starts or ts < starts[t]]
    assert early == [], f"records visible before their commit began: {early[:5]}"
