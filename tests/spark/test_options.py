"""Option parsing of the ``headwater`` format against Spark's Kafka source's options (fast, no
Spark session, no cluster): every option of Spark's source is either taken with its meaning or
refused with an error naming it; security options map to ClientSecurity or are refused; the
docs/spark.md table lists every one of them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from headwater_spark import stream as stream_mod
from headwater_spark.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    check_read_options,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)
from headwater_spark.security import REFUSED, SECURITY_OPTIONS, parse_jaas, parse_security
from headwater_spark.stream import HeadwaterStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from headwater.client.types import TopicPartition
from headwater.dev.tls import CertificateAuthority
from headwater.errors import InvalidConfigError

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]
BASE = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
SINK = {"kafka.bootstrap.servers": "h:1", "topic": "t"}
JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="pw";'
)

#: Spark's Kafka source and sink options (Structured Streaming + Kafka Integration Guide,
#: Spark 4.x) and one valid value each, read side; None: Headwater refuses the option.
SPARK_READ = {
    "assign": '{"t": [0]}',
    "subscribe": "t",
    "subscribePattern": "t.*",
    "kafka.bootstrap.servers": "h:1",
    "startingTimestamp": "1000",
    "startingOffsetsByTimestamp": '{"t": {"0": 1000}}',
    "startingOffsets": "earliest",
    "endingTimestamp": "2000",
    "endingOffsetsByTimestamp": '{"t": {"0": 2000}}',
    "endingOffsets": "latest",
    "failOnDataLoss": "false",
    "kafkaConsumer.pollTimeoutMs": "5000",
    "fetchOffset.numRetries": None,
    "fetchOffset.retryIntervalMs": None,
    "maxOffsetsPerTrigger": "100",
    "minOffsetsPerTrigger": "10",
    "maxTriggerDelay": "15m",
    "minPartitions": "4",
    "maxRecordsPerPartition": "1000",
    "groupIdPrefix": "spark-kafka-source",
    "kafka.group.id": "g",
    "includeHeaders": "true",
    "startingOffsetsByTimestampStrategy": "latest",
    "kafka.isolation.level": "read_committed",
    "kafka.auto.offset.reset": None,
    "kafka.enable.auto.commit": None,
    "kafka.key.deserializer": None,
    "kafka.value.deserializer": None,
    "kafka.interceptor.classes": None,
}
SPARK_WRITE = {
    "kafka.bootstrap.servers": "h:1",
    "topic": "t",
    "kafka.key.serializer": None,
    "kafka.value.serializer": None,
    "kafka.acks": None,
    "kafka.linger.ms": None,
    "kafka.transactional.id": None,
}
STREAM_ONLY = {"maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"}
BATCH_ONLY = {"endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets"}
SOURCE_CHOICE = {"assign", "subscribe", "subscribePattern"}


def _one(name: str, value: str, streaming: bool) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": "h:1"}
    if name not in SOURCE_CHOICE:
        opts["subscribe"] = "t"
    if name == "maxTriggerDelay" and streaming:
        opts["minOffsetsPerTrigger"] = "1"
    if name == "startingOffsets" and not streaming:
        value = "earliest"
    opts[name] = value
    return opts


@pytest.mark.parametrize("name", sorted(SPARK_READ))
def test_every_spark_read_option_is_taken_or_refused_by_name(name: str) -> None:
    value = SPARK_READ[name]
    if value is None:
        with pytest.raises(InvalidConfigError, match=re.escape(name.lower())):
            check_read_options(_one(name, "x", True))
        return
    streaming = name not in BATCH_ONLY
    parsed = parse_source_options(_one(name, value, streaming), streaming=streaming)
    assert parsed.bootstrap == "h:1"
    if name in STREAM_ONLY:  # and refused by name in a batch read
        with pytest.raises(InvalidConfigError, match=name):
            parse_source_options(_one(name, value, False), streaming=False)


@pytest.mark.parametrize("name", sorted(SPARK_WRITE))
def test_every_spark_write_option_is_taken_or_refused_by_name(name: str) -> None:
    value = SPARK_WRITE[name]
    opts = {**SINK, name: value or "x"}
    if value is None:
        with pytest.raises(InvalidConfigError, match=re.escape(name.lower())):
            parse_sink_options(opts)
    else:
        assert parse_sink_options(opts).topic == "t"


def test_docs_table_lists_every_spark_option() -> None:
    doc = (ROOT / "docs" / "spark.md").read_text()
    start = doc.index("## Security (TLS and SCRAM)")
    end = doc.index("\n## ", doc.index("## Every option of Spark's Kafka source"))
    first_cells = re.findall(r"^\| ([^|]+) \|", doc[start:end], re.M)
    listed = {name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)}
    security = set(SECURITY_OPTIONS) | set(REFUSED)
    missing = (set(SPARK_READ) | set(SPARK_WRITE) | security) - listed
    assert not missing, f"docs/spark.md does not list {sorted(missing)}"


def test_misspelt_and_misplaced_options_are_named() -> None:
    with pytest.raises(InvalidConfigError, match="unknown option subscirbe"):
        check_read_options({**BASE, "subscirbe": "t"})
    with pytest.raises(InvalidConfigError, match="unknown option tpoic"):
        parse_sink_options({**SINK, "tpoic": "x"})
    with pytest.raises(InvalidConfigError, match="startingoffsets is not a write option"):
        parse_sink_options({**SINK, "startingOffsets": "earliest"})
    with pytest.raises(InvalidConfigError, match="exactlyonce is not a read option"):
        check_read_options({**BASE, "exactlyOnce": "true"})
    with pytest.raises(InvalidConfigError, match=r"kafka.request.timeout.ms is not supported"):
        parse_sink_options({**SINK, "kafka.request.timeout.ms": "1000"})
    with pytest.raises(InvalidConfigError, match=r"kafka.fetch.max.bytes.*fetchMaxBytes"):
        check_read_options({**BASE, "kafka.fetch.max.bytes": "1000"})
    with pytest.raises(InvalidConfigError, match=r"committogroup|commitToGroup"):
        parse_source_options({**BASE, "commitToGroup": "g"}, streaming=False)


def test_admission_control_options() -> None:
    o = parse_source_options(
        {**BASE, "minOffsetsPerTrigger": "10", "maxTriggerDelay": "30s"}, streaming=True
    )
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (10, 30_000)
    o = parse_source_options({**BASE, "minOffsetsPerTrigger": "10"}, streaming=True)
    assert o.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS == 900_000
    assert [parse_duration_ms("d", v) for v in ("250", "250ms", "2s", "3m", "3min", "1h")] == [
        250, 250, 2000, 180_000, 180_000, 3_600_000,
    ]  # fmt: skip
    bad = [
        ({"minOffsetsPerTrigger": "10", "maxTriggerDelay": "soon"}, "maxTriggerDelay"),
        ({"maxTriggerDelay": "1m"}, "maxTriggerDelay needs minOffsetsPerTrigger"),
        ({"minOffsetsPerTrigger": "100", "maxOffsetsPerTrigger": "10"}, "minOffsetsPerTrigger"),
        ({"minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger must be > 0"),
    ]
    for extra, message in bad:
        with pytest.raises(InvalidConfigError, match=message):
            parse_source_options({**BASE, **extra}, streaming=True)


def test_group_options() -> None:
    assert (
        parse_source_options({**BASE, "kafka.group.id": "g"}, streaming=True).commit_to_group == "g"
    )
    assert (
        parse_source_options({**BASE, "commitToGroup": "g"}, streaming=True).commit_to_group == "g"
    )
    o = parse_source_options({**BASE, "groupIdPrefix": "pre"}, streaming=True)
    assert (o.commit_to_group, o.group_id_prefix) == (None, "pre")
    reader = HeadwaterStreamReader({**BASE, "groupIdPrefix": "pre"})
    assert reader.group is not None and re.fullmatch(r"pre-[0-9a-f-]{36}", reader.group)
    assert HeadwaterStreamReader({**BASE, "kafka.group.id": "g"}).group == "g"
    with pytest.raises(InvalidConfigError, match="different groups"):
        parse_source_options({**BASE, "kafka.group.id": "a", "commitToGroup": "b"}, streaming=True)
    with pytest.raises(InvalidConfigError, match=r"groupIdPrefix and kafka.group.id"):
        parse_source_options({**BASE, "kafka.group.id": "a", "groupIdPrefix": "p"}, streaming=True)


def test_min_offsets_skip_triggers_until_enough_or_delay(monkeypatch: Any) -> None:
    now = [1_000_000.0]
    monkeypatch.setattr(stream_mod.time, "time", lambda: now[0])
    reader = HeadwaterStreamReader(
        {**BASE, "minOffsetsPerTrigger": "100", "maxTriggerDelay": "60s"}
    )
    assert reader.getDefaultReadLimit() == ReadMinRows(100)
    limit = ReadMinRows(100)
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    begin = {t0: 0, t1: 0}
    assert not reader._delay(begin, {t0: 5, t1: 0}, limit)  # the first trigger is admitted
    now[0] += 1
    assert reader._delay(begin, {t0: 60, t1: 39}, limit)  # 99 < 100: skipped
    now[0] += 1
    assert not reader._delay(begin, {t0: 60, t1: 40}, limit)  # 100 over two partitions
    now[0] += 59
    assert reader._delay(begin, {t0: 1, t1: 0}, limit)  # 59 s since the last batch
    now[0] += 1
    assert not reader._delay(begin, {t0: 1, t1: 0}, limit)  # maxTriggerDelay passed
    now[0] += 1
    assert not reader._delay(begin, {t0: 1, t1: 0}, ReadAllAvailable())  # everything asked for
    reader._target = {t0: 1, t1: 0}
    assert not reader._delay(begin, {t0: 1, t1: 0}, limit)  # AvailableNow must finish
    both = HeadwaterStreamReader({**BASE, "minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "9"})
    assert both.getDefaultReadLimit() == ReadMaxRows(9)
    assert not both._delay(begin, {t0: 0, t1: 0}, ReadMaxRows(9))
    assert both._delay(begin, {t0: 4, t1: 0}, ReadMaxRows(9))  # the minimum applies with max


# ------------------------------------------------------------------------ security


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    issued = CertificateAuthority(d / "ca").issued("alice")
    keystore = d / "alice-keystore.pem"
    keystore.write_bytes(issued.key.read_bytes() + issued.cert.read_bytes())
    jks = d / "store.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    return {"ca": issued.ca, "cert": issued.cert, "key": issued.key, "ks": keystore, "jks": jks}


def _sec(**opts: str) -> Any:
    return parse_security({k.lower(): v for k, v in opts.items()})


def test_plaintext_is_the_default_and_takes_no_tls_or_sasl_option(pki: dict[str, Path]) -> None:
    assert _sec().client_security() is None
    assert _sec(**{"kafka.security.protocol": "plaintext"}).client_security() is None
    for name, value in [
        ("kafka.ssl.truststore.location", str(pki["ca"])),
        ("kafka.sasl.mechanism", "SCRAM-SHA-256"),
        ("kafka.sasl.jaas.config", JAAS),
    ]:
        with pytest.raises(InvalidConfigError, match=rf"option {name} is set but.*PLAINTEXT"):
            _sec(**{name: value})
    with pytest.raises(InvalidConfigError, match=r"kafka.security.protocol must be one of"):
        _sec(**{"kafka.security.protocol": "TLS"})


def test_ssl_maps_truststore_and_pem_keystore(pki: dict[str, Path]) -> None:
    sec = _sec(
        **{
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.location": str(pki["ca"]),
            "kafka.ssl.truststore.type": "PEM",
        }
    ).client_security()
    assert sec.tls and sec.ca_file == str(pki["ca"]) and sec.cert_file is None
    assert sec.username is None
    mtls = _sec(
        **{
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.location": str(pki["ca"]),
            "kafka.ssl.keystore.location": str(pki["ks"]),
            "kafka.ssl.keystore.type": "PEM",
        }
    ).client_security()
    assert Path(mtls.cert_file).read_bytes() == pki["cert"].read_bytes()
    assert Path(mtls.key_file).read_bytes() == pki["key"].read_bytes()
    assert Path(mtls.key_file).stat().st_mode & 0o077 == 0
    inline = _sec(
        **{
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.certificates": pki["ca"].read_text(),
            "kafka.ssl.keystore.certificate.chain": pki["cert"].read_text(),
            "kafka.ssl.keystore.key": pki["key"].read_text(),
        }
    ).client_security()
    assert Path(inline.ca_file).read_bytes() == pki["ca"].read_bytes()
    assert Path(inline.cert_file).read_bytes() == pki["cert"].read_bytes()


def test_sasl_maps_scram_credentials(pki: dict[str, Path]) -> None:
    sec = _sec(
        **{
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": JAAS,
            "kafka.ssl.truststore.location": str(pki["ca"]),
        }
    ).client_security()
    assert (sec.username, sec.password, sec.mechanism) == ("alice", "pw", "SCRAM-SHA-256")
    assert sec.tls and sec.ca_file == str(pki["ca"])
    plain = _sec(
        **{
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": JAAS,
        }
    ).client_security()
    assert not plain.tls and (plain.username, plain.mechanism) == ("alice", "SCRAM-SHA-512")
    assert parse_jaas(
        "org.apache.kafka.common.security.scram.ScramLoginModule required\n"
        '  username="bob" password="p\\"w;x"  ;'
    ) == ("bob", 'p"w;x')


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"kafka.security.protocol": "SASL_SSL"}, "kafka.sasl.mechanism.*GSSAPI"),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"},
            "kafka.sasl.mechanism=PLAIN is not supported",
        ),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"},
            "kafka.sasl.mechanism=GSSAPI is not supported",
        ),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256"},
            "needs the option kafka.sasl.jaas.config",
        ),
        (
            {
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "SCRAM-SHA-256",
                "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain."
                'PlainLoginModule required username="a" password="b";',
            },
            "PlainLoginModule is not supported",
        ),
        (
            {
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "SCRAM-SHA-256",
                "kafka.sasl.jaas.config": JAAS.replace(' password="pw"', ""),
            },
            "needs username",
        ),
        ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS"}, "JKS"),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "@jks"},
            "is not PEM",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/nonexistent"},
            "cannot read",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.password": "x"},
            "kafka.ssl.truststore.password is not supported",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.key.password": "x"},
            "kafka.ssl.key.password is not supported",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.endpoint.identification.algorithm": ""},
            "endpoint.identification.algorithm must be https",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.keystore.location": "@ca"},
            "exactly one private key",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.keystore.key": "x"},
            "go together",
        ),
        ({"kafka.security.protocol": "SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256"}, "SSL"),
        ({"kafka.sasl.kerberos.service.name": "kafka"}, "Kerberos"),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.foo": "x"},
            "kafka.ssl.foo is not supported",
        ),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.bar": "x"},
            "kafka.sasl.bar is not supported",
        ),
    ],
)
def test_unsupported_security_is_refused_by_name(
    pki: dict[str, Path], opts: dict[str, str], message: str
) -> None:
    resolved = {k: str(pki[v[1:]]) if v.startswith("@") else v for k, v in opts.items()}
    with pytest.raises(InvalidConfigError, match=message):
        _sec(**resolved)
    with pytest.raises(InvalidConfigError, match=message):  # the sink refuses it too
        parse_sink_options({**SINK, **resolved})
