"""Spark's Kafka security options on a secured cluster (real local[2] SparkSession): mTLS
(client certificates required), SCRAM, the authorizer on.

The cluster: etcd over https, 1 controller, 1 broker, 1 coordinator, every service serving TLS
with client certificates required and the principal mapping ``CN=<name>,O=Headwater ->
<name>``; super users ``admin`` (SCRAM-SHA-512), ``alice`` (SCRAM-SHA-256, created by the
fixture) and ``mtls-user`` (a certificate). Reads and writes go through the
``kafka.security.protocol`` / ``kafka.sasl.*`` / ``kafka.ssl.*`` options only:

* SASL_SSL with SCRAM-SHA-256 (the keystore holds ``CN=nobody``, a certificate without any
  right, which the cluster requires: only alice's SCRAM login can grant access): batch read,
  batch write, and a streaming copy (source and sink) committing to ``kafka.group.id``;
* SSL with a PEM keystore of ``CN=mtls-user`` (the certificate is the identity): batch read and
  write;
* the options take effect: the ``nobody`` certificate alone is refused by the authorizer, a
  wrong password fails the login.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.client import AdminClient, Consumer, Producer, TopicPartition
from headwater.client.admin import AsyncAdminClient
from headwater.dev.cluster import LocalCluster
from tests.helpers.wait import wait_for

# Each test runs several Spark jobs (and the first starts the JVM and a cluster): on a loaded
# 2-core CI machine that outlasts the suite's 300 s default.
pytestmark = pytest.mark.timeout(900)

MAPPING = "RULE:^CN=([^,]*),O=Headwater$/$1/L,DEFAULT"
ALICE_PW = "alice-secret pw"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("spark-secure")
    with LocalCluster(
        data_dir,
        brokers=1,
        controllers=1,
        coordinators=1,
        coordinator_args=["--offsets-topic-partitions", "1", "--transaction-state-partitions", "1"],
        etcd_unsafe_no_fsync=True,
        tls=True,
        tls_client_auth="required",
        ca_dir=data_dir / "ca",
        security_args=["--principal-mapping-rules", MAPPING],
        authorizer=True,
        super_users=["User:alice", "User:mtls-user"],
        startup_timeout=120,
    ) as c:

        async def add_alice() -> None:
            async with AsyncAdminClient(c.bootstrap, security=c.admin_security()) as admin:
                await admin.alter_user_scram_credentials([("alice", "SCRAM-SHA-256", ALICE_PW)])

        asyncio.run(add_alice())
        with AdminClient(c.bootstrap, security=c.admin_security()) as admin:
            admin.create_topic("sec-in", 2, 1)
            admin.create_topic("sec-out", 1, 1)
            admin.create_topic("sec-mtls-out", 1, 1)
            admin.create_topic("sec-stream-out", 1, 1)
        with Producer(c.bootstrap, acks="all", security=c.admin_security()) as p:
            futs = [p.send("sec-in", b"v%d" % i, partition=i % 2) for i in range(40)]
            p.flush()
            for f in futs:
                f.result(timeout=60)
        yield c


def _ca(c: LocalCluster) -> str:
    sec = c.client_security()
    assert sec is not None and sec.ca_file is not None
    return sec.ca_file


def keystore(c: LocalCluster, tmp: Path, name: str) -> str:
    """Kafka's PEM keystore (private key and certificate chain in one file) of ``CN=name``."""
    sec = c.client_security(name)
    assert sec is not None and sec.cert_file and sec.key_file
    path = tmp / f"{name}-keystore.pem"
    path.write_bytes(Path(sec.key_file).read_bytes() + Path(sec.cert_file).read_bytes())
    return str(path)


def ssl(c: LocalCluster, tmp: Path, name: str) -> dict[str, str]:
    """SSL with a PEM truststore and the PEM keystore of ``CN=name`` (mTLS)."""
    return {
        "kafka.bootstrap.servers": c.bootstrap,
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.location": _ca(c),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.keystore.location": keystore(c, tmp, name),
        "kafka.ssl.keystore.type": "PEM",
    }


def sasl_ssl(c: LocalCluster, tmp: Path, password: str = ALICE_PW) -> dict[str, str]:
    """What a Spark job moved from format("kafka") to a SASL_SSL cluster gives (plus the
    rightless certificate this cluster requires)."""
    return {
        **ssl(c, tmp, "nobody"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": f'{SCRAM} required username="alice" password="{password}";',
    }


def _read(spark: Any, options: dict[str, str], topic: str = "", assign: str = "") -> list[bytes]:
    reader = spark.read.format("headwater")
    reader = reader.option("assign", assign) if assign else reader.option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted(bytes(r.value) for r in reader.load().collect())


def _write(spark: Any, options: dict[str, str], topic: str, values: list[str]) -> None:
    writer = spark.createDataFrame([(v,) for v in values], "value string").write
    writer = writer.format("headwater").mode("append").option("topic", topic)
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def _topic_values(c: LocalCluster, topic: str) -> list[bytes]:
    """Every value of partition 0 of ``topic``, read with the admin's credentials."""
    tp = TopicPartition(topic, 0)
    with Consumer(c.bootstrap, auto_offset_reset="earliest", security=c.admin_security()) as con:
        end = con.end_offsets([tp])[tp]
        con.assign([tp])
        con.seek_to_beginning(tp)
        got: list[bytes] = []

        def drained() -> bool:
            got.extend(r.value for r in con.poll(timeout_ms=500))
            return len(got) >= end

        wait_for(drained, timeout=60, what=f"{end} records of {topic}")
    return sorted(got)


EXPECTED_IN = sorted(b"v%d" % i for i in range(40))


def test_sasl_ssl_scram_batch_read_and_write(
    spark: Any, secure: LocalCluster, tmp_path: Path
) -> None:
    options = sasl_ssl(secure, tmp_path)
    assert _read(spark, options, "sec-in") == EXPECTED_IN
    _write(spark, options, "sec-out", ["a", "b", "c"])
    assert _topic_values(secure, "sec-out") == [b"a", b"b", b"c"]


def test_ssl_pem_keystore_mtls_batch_read_and_write(
    spark: Any, secure: LocalCluster, tmp_path: Path
) -> None:
    options = ssl(secure, tmp_path, "mtls-user")
    assert _read(spark, options, "sec-in") == EXPECTED_IN
    _write(spark, options, "sec-mtls-out", ["m1", "m2"])
    assert _topic_values(secure, "sec-mtls-out") == [b"m1", b"m2"]


def test_sasl_ssl_streaming_copy_commits_to_the_group(
    spark: Any, secure: LocalCluster, tmp_path: Path
) -> None:
    options = sasl_ssl(secure, tmp_path)
    reader = spark.readStream.format("headwater").option("subscribe", "sec-in")
    reader = reader.option("startingOffsets", "earliest").option("kafka.group.id", "sec-copy")
    for k, v in options.items():
        reader = reader.option(k, v)
    writer = reader.load().select("value").writeStream.format("headwater")
    writer = writer.option("topic", "sec-stream-out")
    writer = writer.option("checkpointLocation", str(tmp_path / "ckpt"))
    for k, v in options.items():
        writer = writer.option(k, v)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None
    assert _topic_values(secure, "sec-stream-out") == EXPECTED_IN
    with AdminClient(secure.bootstrap, security=secure.admin_security()) as admin:
        committed = admin.list_consumer_group_offsets("sec-copy")
    assert committed == {TopicPartition("sec-in", 0): 20, TopicPartition("sec-in", 1): 20}


def test_security_options_take_effect(spark: Any, secure: LocalCluster, tmp_path: Path) -> None:
    """The rightless certificate alone is refused by the authorizer (ListOffsets of assigned
    partitions), a wrong SCRAM password fails the login: the options are used, not dropped."""
    assign = '{"sec-in": [0, 1]}'
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        _read(spark, ssl(secure, tmp_path, "nobody"), assign=assign)
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED"):
        _read(spark, sasl_ssl(secure, tmp_path, password="wrong"), assign=assign)
