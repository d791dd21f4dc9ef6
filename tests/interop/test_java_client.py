"""The Java client (clients/java, a Maven project): its `mvn test` passes against a real local
cluster started here (two brokers and a group coordinator, so produce and fetch are routed to
different leaders and the group stream has a coordinator); then the Python client reads what
Java produced and finds every record once, on the partition the shared partitioner names.

Maven runs with -B and a local repository kept between runs (tests/interop/java_util.py:
$HEADWATER_MAVEN_REPO or ~/.m2/repository); examples/java is built against the clients/java
jar installed there. Measured on two cores at nice 15 while other suites ran (load 11-30):
`mvn -B compile` with an EMPTY local repository (downloads the Maven plugins, grpc-java 1.83.1,
protobuf-java 4.33.5, protoc, protoc-gen-grpc-java, JUnit: ~60 MB) took 141 s wall (46 CPU-s);
with the repository warm and target/ empty (CI's case: a fresh clone) `mvn -B test-compile`
took 104 s wall (45 CPU-s: javac on the generated code is most of it); with target/ up to date
4 s (protoc is skipped for unchanged protos: checkStaleness). The JUnit tests themselves take
~60 s against the cluster (the two-member group test ~35 s of it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from java_util import EXAMPLE_DIR, JAVA_DIR, check, install_client, mvn

from headwater.client import Consumer, TopicPartition, crc32c_partition
from headwater.dev.cluster import LocalCluster

#: produced by ClusterTest.produceAndConsumeByPartition: 12 keys x 5 rounds on 3 partitions,
#: then one record with a null key and one with a null value (partition 0)
RECORDS_TOPIC = "java-client-records"
KEYED = 60
#: a cold local Maven repository downloads and builds for minutes (docstring)
pytestmark = pytest.mark.timeout(1800)

JAVA_TESTS = {
    "PartitionerTest",
    "ClusterTest",
    "GroupConsumerTest",
}


@pytest.fixture(scope="module")
def java_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("java-cluster")
    with LocalCluster(
        data_dir,
        brokers=2,
        controllers=1,
        coordinators=1,
        coordinator_args=["--offsets-topic-partitions", "2"],
        etcd_unsafe_no_fsync=True,
        tls=False,
        authorizer=False,
    ) as c:
        yield c


def test_java_client_against_a_cluster_and_python_reads_what_java_wrote(
    java_cluster: LocalCluster,
) -> None:
    env = dict(os.environ, HEADWATER_BOOTSTRAP=java_cluster.bootstrap)
    out = check(mvn(JAVA_DIR, "test", env=env), "mvn test (clients/java)")
    reports = JAVA_DIR / "target" / "surefire-reports"
    ran = {
        p.name.removeprefix("TEST-dev.headwater.client.").removesuffix(".xml")
        for p in reports.glob("TEST-*.xml")
    }
    assert ran >= JAVA_TESTS, (ran, out[-3000:])
    assert "Tests run: " in out and ", Failures: 0, Errors: 0, Skipped: 0" in out

    seen = []
    with Consumer(java_cluster.bootstrap) as consumer:
        tps = [TopicPartition(RECORDS_TOPIC, p) for p in range(3)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 60
        while len(seen) < KEYED + 2 and time.monotonic() < deadline:
            seen += consumer.poll(timeout_ms=200)
    assert len(seen) == KEYED + 2, f"{len(seen)} records"
    keyed = [r for r in seen if r.key is not None and r.value is not None]
    assert len(keyed) == KEYED
    # every record once (idempotent producer), where Python's partitioner says
    assert len({(r.key, r.value) for r in keyed}) == KEYED
    assert all(r.partition == crc32c_partition(r.key, 3) for r in keyed)
    assert {r.value for r in keyed} == {
        b"value-%d-%d" % (k, n) for k in range(12) for n in range(5)
    }
    nulls = sorted(
        (r.key is None, r.value is None) for r in seen if r.key is None or r.value is None
    )
    assert nulls == [(False, True), (True, False)]


def test_java_example_produces_and_consumes_as_a_group(java_cluster: LocalCluster) -> None:
    """examples/java builds against the installed clients/java artifact and, run against the
    cluster, produces ten greetings and reads them back as a group member."""
    install_client()
    out = check(
        mvn(EXAMPLE_DIR, "-q", "compile", "exec:java", f"-Dexec.args={java_cluster.bootstrap}"),
        "examples/java",
    )
    lines = out.splitlines()
    assert "consumed 10" in lines, out[-3000:]
    values = {line.split(" ", 1)[1] for line in lines if line.startswith("greetings-")}
    assert values == {f"hello {i}" for i in range(10)}, out[-3000:]
