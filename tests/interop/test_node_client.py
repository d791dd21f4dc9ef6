"""The Node.js client (clients/node: @grpc/grpc-js + @grpc/proto-loader reading proto/ at run
time) against a real local cluster started here (two brokers and a group coordinator): its
`node --test` suite (partitioner vectors, admin, keyed produce and consume by partition,
idempotent retry, the group stream with two members and a survivor resuming from commits, a
member that stops polling losing its partitions), after Python produced a topic Node reads;
then the Python client reads what Node produced and finds every record once, on the partition
the shared partitioner names.

`npm ci --prefer-offline` runs once per package-lock.json (a stamp in node_modules/): 29 s
with an empty npm cache, 14 s with a warm one (27 s without --prefer-offline), skipped while
the stamp is current; measured on two cores under load 20.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from interop_util import client_cluster, npm_ci, read_all

from headwater.client import AdminClient, Producer, crc32c_partition
from headwater.dev.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "clients" / "node"
#: produced by "keyed records go where the shared partitioner says" (test/cluster.test.js)
RECORDS_TOPIC = "node-client-records"
KEYED = 60


@pytest.fixture(scope="module")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    npm_ci(NODE_DIR)
    with client_cluster(tmp_path_factory.mktemp("node-cluster"), brokers=2) as c:
        yield c


PYTHON_VALUES: list[bytes | None] = [f"py-{i}".encode() for i in range(7)] + [None]
PYTHON_KEYS = [None, b"k1", b"", b"k3", None, b"k5", b"k6", b"tomb"]


def produce_with_python(bootstrap: str) -> str:
    """A topic with 8 records from the Python producer (batch path, zstd): null and empty keys,
    a null value, a header; test/cluster.test.js checks what Node reads of it."""
    name = "python-for-node"
    with AdminClient(bootstrap) as admin:
        admin.create_topic(name, partitions=1)
    with Producer(bootstrap, compression_type="zstd", linger_ms=50) as producer:
        futures = [
            producer.send(name, value, key=key, partition=0, headers=[("lang", b"python")])
            for value, key in zip(PYTHON_VALUES, PYTHON_KEYS, strict=True)
        ]
        producer.flush()
    assert [f.result().offset for f in futures] == list(range(8))
    return name


def test_node_client_against_a_cluster_and_python_reads_what_node_wrote(
    node_cluster: LocalCluster,
) -> None:
    env = dict(
        os.environ,
        HEADWATER_BOOTSTRAP=node_cluster.bootstrap,
        HEADWATER_PYTHON_TOPIC=produce_with_python(node_cluster.bootstrap),
    )
    proc = subprocess.run(
        ["nice", "-n", "15", "node", "--test", "--test-reporter=tap", "test/"],
        cwd=NODE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = f"{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"node --test failed:\n{output}"
    passed = set(re.findall(r"^ok \d+ - (.+)$", proc.stdout, re.MULTILINE))
    assert {
        "crc32c matches the shared vectors",
        "partition matches the shared vectors",
        "admin creates, lists and describes topics, with typed errors",
        "keyed records go where the shared partitioner says and are consumed by partition",
        "a retried produce is stored once; a sequence gap is refused",
        "reads what the Python client produced (batch path, zstd)",
        "two group members split the partitions; the survivor resumes from commits",
        "the group stream refuses a bad open with a typed error",
        "a member that stops polling loses its partitions after the session timeout",
    } <= passed, proc.stdout[-4000:]

    seen = read_all(node_cluster.bootstrap, RECORDS_TOPIC, 3, KEYED)
    assert len(seen) == KEYED, f"{len(seen)} records"
    # every record once (idempotent producer), where Python's partitioner says
    assert len({(r.key, r.value) for r in seen}) == KEYED
    assert all(r.key is not None and r.partition == crc32c_partition(r.key, 3) for r in seen)
    assert {r.value for r in seen} == {b"value-%d-%d" % (k, n) for k in range(12) for n in range(5)}
    assert all(r.headers[1] == ("null", None) for r in seen)
