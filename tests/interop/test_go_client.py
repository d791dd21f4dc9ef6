"""The Go client (clients/go, its own Go module): its generated code is what scripts/gen_go.sh
makes from proto/, it is gofmt-formatted and `go vet` clean, and its `go test` passes against a
real local cluster started here (two brokers, so produce and fetch are routed to different
leaders, and a group coordinator for the group stream: two Go members split a topic's
partitions and see every record once, one leaves and the other resumes from its commits, one
that stops polling loses its partitions after the session timeout); then the Python client
reads what Go produced and finds every record once, on the partition the shared partitioner
names; last, a Go test SIGKILLs (by PID) the leader of a
partition under the Go producer and partition consumer: every send succeeds, the consumer
carries on at the new leader, and the log holds every record once, in order.

`go test` builds with Go's content-addressed build cache (GOCACHE) and the module cache
(GOMODCACHE): the test binary of the client and grpc-go built with an empty GOCACHE in 258 s
wall (120 CPU-s) at nice 15 on two cores under load 8-12, with a warm one in 4 s. The modules
come from the Go module proxy on first use, as for scripts/tools/go-tool.sh.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from interop_util import client_cluster, read_all

from headwater.client import crc32c_partition
from headwater.dev.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
GO_DIR = ROOT / "clients" / "go"
GEN = GO_DIR / "gen" / "headwater" / "v1"
#: produced by TestProduceAndConsumeByPartition (clients/go/cluster_test.go): 12 keys x 5
#: rounds on 3 partitions, then one record with a null key and one with a null value
RECORDS_TOPIC = "go-client-records"
KEYED = 60
#: clients/go/failover_test.go: kills the leader broker of its topic, so it runs last, alone
FAILOVER = "TestFailoverKillsTheLeaderUnderAProducerAndAConsumer"


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    assert Path(go).exists(), "Go is needed for the Go client's tests (PATH or /usr/local/go)"
    return go


def test_generated_go_code_is_reproducible_from_proto(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_go.sh"), str(tmp_path)],
        check=True,
        timeout=1800,  # builds buf and the plugins on first use (cached after)
    )
    generated = {p.name: p.read_bytes() for p in (tmp_path / "headwater" / "v1").glob("*.go")}
    committed = {p.name: p.read_bytes() for p in GEN.glob("*.go")}
    protos = sorted(p.stem for p in (ROOT / "proto" / "headwater" / "v1").glob("*.proto"))
    assert protos and len(generated) >= len(protos) + 1  # a .pb.go each, _grpc.pb.go per service
    assert sorted(generated) == sorted(committed), "run scripts/gen_go.sh"
    stale = [name for name in generated if generated[name] != committed[name]]
    assert not stale, f"stale Go code {stale}: run scripts/gen_go.sh and commit clients/go/gen/"


@pytest.fixture(scope="module")
def go_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir = tmp_path_factory.mktemp("go-cluster")
    with client_cluster(data_dir, brokers=2) as c:
        yield c


def test_go_client_against_a_cluster_and_python_reads_what_go_wrote(
    go_cluster: LocalCluster,
) -> None:
    env = dict(
        os.environ,
        HEADWATER_BOOTSTRAP=go_cluster.bootstrap,
        GOTOOLCHAIN="local",
        GOFLAGS="-mod=readonly",
        CGO_ENABLED="0",
    )
    gofmt = subprocess.run(
        [str(Path(_go()).with_name("gofmt")), "-l", "."],
        cwd=GO_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert gofmt.stdout == "", f"not gofmt-formatted: {gofmt.stdout}"
    vet = subprocess.run(
        [_go(), "vet", "./..."], cwd=GO_DIR, env=env, capture_output=True, text=True, timeout=1200
    )
    assert vet.returncode == 0, f"go vet:\n{vet.stderr[-3000:]}"
    # every test but the one that kills a broker, which runs last (below)
    passed = _go_test(env, "-skip", FAILOVER)
    assert {
        "TestPartitionerMatchesTheSharedVectors",
        "TestAdminCreatesListsAndDescribesTopics",
        "TestProduceAndConsumeByPartition",
        "TestRetriedProduceIsStoredOnce",
        "TestUnknownTopicIsATypedError",
        "TestPollEndsWithItsContextAndResumes",
        "TestGroupMembersSplitPartitionsAndTheSurvivorResumesFromCommits",
        "TestGroupMemberThatStopsPollingLosesItsPartitions",
        "TestGroupStreamRefusesBadOpenWithATypedError",
    } <= passed, passed

    seen = read_all(go_cluster.bootstrap, RECORDS_TOPIC, 3, KEYED + 2)
    assert len(seen) == KEYED + 2, f"{len(seen)} records"
    keyed = [r for r in seen if r.key is not None and r.value is not None]
    assert len(keyed) == KEYED
    # every record once (idempotent producer, no duplicates), where Python's partitioner says
    assert len({(r.key, r.value) for r in keyed}) == KEYED
    assert all(r.partition == crc32c_partition(r.key, 3) for r in keyed)
    values = {b"value-%d-%d" % (k, n) for k in range(12) for n in range(5)}
    assert {r.value for r in keyed} == values
    nulls = [r for r in seen if r.key is None or r.value is None]
    assert sorted((r.key is None, r.value is None) for r in nulls) == [
        (False, True),
        (True, False),
    ]

    # SIGKILL of a partition leader under the Go producer and partition consumer (by PID)
    pids = ",".join(f"{bid}={proc.pid}" for bid, proc in go_cluster.brokers.items())
    assert _go_test(dict(env, HEADWATER_BROKER_PIDS=pids), "-run", FAILOVER, ".") == {FAILOVER}


def _go_test(env: dict[str, str], *args: str) -> set[str]:
    """Run `go test -v` in clients/go; assert it passed; the names of the tests that passed."""
    proc = subprocess.run(
        [_go(), "test", "-count=1", "-v", *args, *([] if args[-1] == "." else ["./..."])],
        cwd=GO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, f"go test failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    return {line.split()[2] for line in proc.stdout.splitlines() if line.startswith("--- PASS")}
