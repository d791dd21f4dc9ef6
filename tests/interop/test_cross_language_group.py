"""One consumer group, three languages (issue 19 item 3): Go produces, Java (the group stream,
clients/java) and Python (the classic protocol, headwater.client.Consumer) consume as one group
at once; the Java member is SIGKILLed (by PID) partway, Python takes its partitions over from
the group's committed offsets; last, Python leaves and a restarted Java member (same member id)
resumes every partition exactly at the committed offsets. Every record the Go producer sent is
seen at least once across the members (at-least-once: none missing).

The Go producer is clients/go/cmd/headwater-produce; the Java member is GroupMember in
clients/java's test sources, run as its own JVM (tests/interop/java_util.py builds its
classpath with Maven). Waits are bounded (wait_for). The whole test took 31 s with warm Maven
and Go caches (two cores under load).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from java_util import member_classpath

from headwater.client import AdminClient, Consumer, TopicPartition
from headwater.dev.cluster import LocalCluster
from tests.helpers.wait import wait_for

ROOT = Path(__file__).resolve().parents[2]
GO_DIR = ROOT / "clients" / "go"
TOPIC = "xlang"
GROUP = "xlang-group"
PARTITIONS = 4
SESSION_MS = 6000
JAVA_MEMBER = "java-member"
WAIT_S = 120

#: a cold Maven repository or Go build cache takes minutes (test_java_client.py, test_go_client.py)
pytestmark = pytest.mark.timeout(1800)


@pytest.fixture(scope="module")
def xcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        tmp_path_factory.mktemp("xlang-cluster"),
        brokers=2,
        controllers=1,
        coordinators=1,
        coordinator_args=["--offsets-topic-partitions", "2"],
        etcd_unsafe_no_fsync=True,
        tls=False,
        authorizer=False,
    ) as c:
        yield c


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    assert Path(go).exists(), "Go is needed for the Go producer (PATH or /usr/local/go)"
    return go


class JavaMember:
    """The Java group member's process and what it printed (GroupMember's line format)."""

    def __init__(self, classpath: str, bootstrap: str, out: Path) -> None:
        self.out = out
        self._file = out.open("w")
        self.proc = subprocess.Popen(
            [
                "java",
                "-Xmx256m",
                "-cp",
                classpath,
                "dev.headwater.client.GroupMember",
                *(bootstrap, GROUP, TOPIC, JAVA_MEMBER, str(SESSION_MS)),
            ],
            stdout=self._file,
            stderr=subprocess.STDOUT,
        )

    def lines(self) -> list[list[str]]:
        return [line.split() for line in self.out.read_text().splitlines() if line.strip()]

    def records(self) -> list[tuple[int, int]]:
        return [(int(w[1]), int(w[2])) for w in self.lines() if w[0] == "RECORD"]

    def assigned(self) -> set[int]:
        """The partitions of the last ASSIGNED line."""
        last = [w for w in self.lines() if w[0] == "ASSIGNED"]
        return {int(p) for p in last[-1][2].split(",")} if last and len(last[-1]) > 2 else set()

    def committed(self) -> dict[int, int]:
        """The highest offset each partition's acknowledged commits reached."""
        out: dict[int, int] = {}
        for w in self.lines():
            if w[0] == "COMMITTED" and len(w) > 1:
                for item in w[1].strip(",").split(","):
                    p, o = item.split("=")
                    out[int(p)] = max(out.get(int(p), 0), int(o))
        return out

    def kill(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        self.proc.wait(timeout=30)
        if not self._file.closed:
            self._file.close()


def _produce(binary: Path, bootstrap: str, n: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(binary), "-bootstrap", bootstrap, "-topic", TOPIC, "-n", str(n), "-batch", "25"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _produced(proc: subprocess.Popen[str], n: int) -> None:
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0 and out.strip() == f"produced {n}", (out, err)


def test_go_produces_java_and_python_consume_as_one_group(
    xcluster: LocalCluster, tmp_path: Path
) -> None:
    boot = xcluster.bootstrap
    producer_bin = tmp_path / "headwater-produce"
    subprocess.run(
        [_go(), "build", "-o", str(producer_bin), "./cmd/headwater-produce"],
        cwd=GO_DIR,
        env=dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=readonly", CGO_ENABLED="0"),
        check=True,
        timeout=1200,
    )
    classpath = member_classpath()
    admin = AdminClient(boot)
    try:
        admin.create_topic(TOPIC, PARTITIONS)
    finally:
        admin.close()
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]

    python_seen: list[tuple[int, int]] = []
    java = JavaMember(classpath, boot, tmp_path / "java-1.out")
    consumer = Consumer(
        boot,
        group_id=GROUP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
    )
    try:
        consumer.subscribe([TOPIC])

        def step() -> None:
            records = consumer.poll(timeout_ms=200)
            python_seen.extend((r.partition, r.offset) for r in records)
            if records:
                try:
                    consumer.commit()
                except Exception as exc:  # a rebalance revoked a partition meanwhile
                    assert "GENERATION" in repr(exc) or "REBALANCE" in repr(exc), repr(exc)

        # both members consume at once: the partitions are split between them
        def shared() -> bool:
            step()
            mine = {tp.partition for tp in consumer.assignment()}
            theirs = java.assigned()
            return 0 < len(mine) < PARTITIONS and theirs == set(range(PARTITIONS)) - mine

        try:
            wait_for(shared, timeout=WAIT_S, what="Java and Python splitting the partitions")
        except AssertionError as exc:
            state = (consumer.assignment(), len(python_seen), java.out.read_text()[-1500:])
            raise AssertionError(f"{exc}: Python assigned, records, Java printed: {state}") from exc
        assert java.proc.poll() is None, java.out.read_text()[-2000:]
        # Go produces while both consume; the Java member reads and commits some of it
        first = _produce(producer_bin, boot, 400)

        def java_committed() -> bool:
            step()
            return bool(java.committed())

        wait_for(java_committed, timeout=WAIT_S, what="the Java member committing")

        # SIGKILL the Java member partway; the group's commits are what it acknowledged
        java_owned = java.assigned()
        java.kill(signal.SIGKILL)
        killed_records = java.records()
        committed = {tp.partition: off for tp, off in consumer.committed(tps).items()}
        for p, offset in java.committed().items():
            assert (committed[p] or 0) >= offset, (p, committed, java.committed())
        took_over = len(python_seen)
        _produced(first, 400)  # the Go producer may still have been sending at the kill
        second = _produce(producer_bin, boot, 400)  # more records while Python takes over

        def python_owns_all() -> bool:
            step()
            return consumer.assignment() == set(tps) and second.poll() is not None

        wait_for(python_owns_all, timeout=WAIT_S, what="Python assigned every partition")
        _produced(second, 400)
        ends = {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}
        assert sum(ends.values()) == 800

        def python_caught_up() -> bool:
            step()
            return all((p, ends[p] - 1) in set(python_seen) for p in ends if ends[p])

        wait_for(python_caught_up, timeout=WAIT_S, what="Python at the end of every partition")
        # Python resumed the dead member's partitions exactly at the group's committed offsets
        for p in java_owned:
            after = [o for q, o in python_seen[took_over:] if q == p]
            assert after and after[0] == (committed[p] or 0), (p, committed[p], after[:5])
        consumer.commit()
        final = consumer.committed(tps)
        assert {tp.partition: off for tp, off in final.items()} == ends
    finally:
        consumer.close()
        java.kill(signal.SIGKILL)  # no-op when already killed

    # the restarted Java member (same member id) resumes exactly at the committed offsets
    third = _produce(producer_bin, boot, 200)
    _produced(third, 200)
    restarted = JavaMember(classpath, boot, tmp_path / "java-2.out")
    try:
        wait_for(
            lambda: len(restarted.records()) >= 200,
            timeout=WAIT_S,
            what="the restarted Java member reading the new records",
        )
        again = restarted.records()
        assert restarted.assigned() == set(range(PARTITIONS))
        for p in range(PARTITIONS):
            offsets = [o for q, o in again if q == p]
            assert not offsets or min(offsets) == ends[p], (p, offsets[:5], ends)
    finally:
        restarted.kill(signal.SIGTERM)

    # at-least-once: every offset of every partition seen by some member, none missing
    with Consumer(boot) as reader:
        final_ends = {tp.partition: off for tp, off in reader.end_offsets(tps).items()}
    assert sum(final_ends.values()) == 1000
    seen = set(killed_records) | set(python_seen) | set(again)
    missing = {(p, o) for p in range(PARTITIONS) for o in range(final_ends[p])} - seen
    assert not missing, f"{len(missing)} records never seen: {sorted(missing)[:10]}"
