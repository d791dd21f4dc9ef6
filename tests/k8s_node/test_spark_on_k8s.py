"""Spark reads Headwater on Kubernetes (issue 20 item 3), against the release ``hw`` in namespace
``headwater`` that ``make k8s-install`` puts on the test node (the ``cluster`` fixture of
test_in_cluster_use.py: installed when absent, a client pod of its services image):

- a 6-partition, RF 3 input topic is created and a Job of the services image produces 100,000
  keyed records (acks=all) through the bootstrap Service (records_job.py);
- a Job of the ``headwater-spark`` image (scripts/k8s/build_images.py: Debian's Java 17 runtime,
  pyspark, the Headwater wheel with ``headwater_spark``), imported into the node's containerd,
  runs spark_job.py: PySpark in local mode reads the topic with ``spark.read.format("headwater")``
  and ``kafka.bootstrap.servers`` = the bootstrap Service's DNS name, and writes one record of
  counts per input partition to a result topic with ``df.write.format("headwater")``;
- the test checks what Spark read (count, distinct keys, per-partition counts and the SHA-256 of
  the (key, value) pairs equal the producer's), that the driver JVM's heap is what
  ``spark.driver.memory`` set, and reads the result topic back from the client pod: one record
  per input partition whose counts are the producer's, summing to 100,000.

The Spark pod's memory is bounded: ``resources.limits.memory`` 1536Mi and
``spark.driver.memory`` 512m (local mode: the driver is the executor); Spark's scratch, the
JVM's and Ivy's files go to an emptyDir at /tmp (the root filesystem is read-only).

Measured on the project's 2-core machine, other helpers' Spark benchmarks and builds running
(load average 20-31; docs/kubernetes.md, "Spark on the node" and "Times"): the image is 684 MiB
(Spark's jars 450 MiB of it), its own layers build cold in about 125 s on top of the cached
``base`` and ``deps``, and a run with nothing changed is a cache hit (0.6 s for all four images);
importing it into the node took 53-54 s; the Spark Job ran 107 s and 272 s (start to complete),
the producer Job 9-12 s, the whole test 276 s (with the import) and 391 s (without it, under more
load). ``pytest -s`` prints the Jobs' reports.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.k8s_node.in_cluster import (
    BOOTSTRAP,
    CONFIGMAP,
    JOB_SCRIPT,
    NS,
    InCluster,
    job_manifest,
    labels,
    unique_name,
)
from tests.k8s_node.node import Node

IMAGES_JSON = Path.home() / ".cache" / "headwater-k8s" / "images" / "out" / "images.json"
SPARK_JOB_SCRIPT = Path(__file__).with_name("spark_job.py")
RECORDS = 100_000
PARTITIONS = 6
SPARK_JOB = "itest-incluster-spark"
DRIVER_MEMORY = "512m"
SPARK_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "768Mi"},
    "limits": {"memory": "1536Mi"},
}
#: importing the Spark image (~0.5 GB of layers, base and deps already there) into the node's
#: containerd under load
IMPORT_TIMEOUT_S = 15 * 60
pytestmark = pytest.mark.timeout(45 * 60)


def spark_image(node: Node) -> str:
    """The ``headwater-spark`` image that build-images.sh built (``make k8s-build``), imported
    into the node's containerd unless it is there already (the reference names the manifest's
    digest)."""
    images = json.loads(IMAGES_JSON.read_text())
    assert "headwater-spark" in images, f"no headwater-spark image in {IMAGES_JSON}"
    entry = images["headwater-spark"]
    sock = str(node.node_dir / "run" / "containerd.sock")
    present = node.run("ctr", "--address", sock, "-n", "k8s.io", "images", "ls", "-q").stdout
    if entry["ref"] in present.split():
        print(f"{entry['ref']} is in the node already")
        return str(entry["ref"])
    t0 = time.monotonic()
    proc = node.import_images(entry["archive"], timeout=IMPORT_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"imported {entry['ref']} in {time.monotonic() - t0:.1f} s")
    return str(entry["ref"])


def spark_job(name: str, image: str, args: list[str]) -> dict[str, Any]:
    """A Job running spark_job.py ARGS in the Spark image (no retry), /tmp a 1 GiB scratch."""
    return job_manifest(
        name, image, "spark", ["python3", "/job/spark_job.py", *args], SPARK_RESOURCES, "1Gi"
    )


def test_a_spark_job_in_a_pod_reads_a_topic_through_the_bootstrap_service_and_writes_counts(
    cluster: InCluster,
) -> None:
    topic, result = unique_name("spark-in"), unique_name("spark-out")
    try:
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIGMAP, "namespace": NS, "labels": labels()},
                "data": {
                    "records_job.py": JOB_SCRIPT.read_text(),
                    "spark_job.py": SPARK_JOB_SCRIPT.read_text(),
                },
            }
        )
        image = spark_image(cluster.node)
        for name, partitions in ((topic, PARTITIONS), (result, 1)):
            cluster.headwater(
                "topics", "create", name, "--partitions", str(partitions),
                "--replication-factor", "3",
            )  # fmt: skip
        produced = cluster.run_job(
            "itest-incluster-spark-produce",
            ["produce", "--bootstrap", BOOTSTRAP, "--topic", topic, "--count", str(RECORDS)],
        )
        assert produced["count"] == RECORDS and len(produced["partitions"]) == PARTITIONS

        args = ["--bootstrap", BOOTSTRAP, "--topic", topic, "--result", result]
        cluster.apply(spark_job(SPARK_JOB, image, [*args, "--driver-memory", DRIVER_MEMORY]))
        read = cluster.wait_job(SPARK_JOB)
        for field in ("count", "distinct_keys", "sha256", "partitions"):
            assert read[field] == produced[field], (field, produced, read)
        assert read["written"] == PARTITIONS, read
        # -Xmx512m: the JVM reports the heap it may grow to (a little under 512 MiB)
        assert 256 * 2**20 < read["driver_max_heap"] <= 512 * 2**20, read

        # the result topic, read back from the client pod
        out = cluster.sh(
            f"headwater consume {result} --from-beginning --max-messages {PARTITIONS + 1} "
            "--timeout-ms 20000 --print-key"
        )
        counts = {}
        for line in out.splitlines():
            key, value = line.split(maxsplit=1)
            assert key not in counts, f"partition {key} written twice: {out}"
            counts[key] = json.loads(value)
        assert {k: c["count"] for k, c in counts.items()} == produced["partitions"], out
        assert all(c["distinct_keys"] == c["count"] for c in counts.values()), out
        assert sum(c["count"] for c in counts.values()) == RECORDS
        # records_job.py's values are 100 random bytes
        assert sum(c["value_bytes"] for c in counts.values()) == RECORDS * 100, out
    finally:
        cluster.kubectl(
            "delete", "job", "itest-incluster-spark-produce", SPARK_JOB,
            "--ignore-not-found", "--cascade=foreground", "--wait=true", timeout=180,
        )  # fmt: skip
        cluster.kubectl("delete", "configmap", CONFIGMAP, "--ignore-not-found")
        cluster.delete_topics(topic, result)
