"""TLS and mTLS on a real cluster (issue 7): every link is TLS, bad peers are refused.

One module cluster: etcd over https with client-certificate auth, 1 controller, 3 brokers and
1 group coordinator, all serving mTLS (client certificates required) with certificates of the
cluster's CA, and the principal mapping rule ``CN=<name>,O=Headwater -> <name lower-cased>``.
The cluster starting at all shows controller -> broker TLS (a broker is ready only once the
controller's UpdateMetadata reached it); produce with acks=all and min.insync.replicas=3 shows
broker <-> broker replication over TLS; the group consumer shows client <-> coordinator and
coordinator -> broker TLS.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from headwater import errors
from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer
from headwater.client.security import ClientSecurity
from headwater.client.types import TopicPartition
from headwater.dev.cluster import LocalCluster, sync_channel
from headwater.dev.tls import CertificateAuthority, Issued
from headwater.platform import etcd as hetcd
from headwater.v1 import broker_pb2_grpc, metadata_pb2
from tests.quotas.quota_helpers import metric

TOPIC = "tls-topic"
MAPPING = "RULE:^CN=([^,]*),O=Headwater$/$1/L,DEFAULT"


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("tls-cluster")
    with LocalCluster(
        data_dir,
        brokers=3,
        controllers=1,
        coordinators=1,
        coordinator_args=[
            "--offsets-topic-partitions", "3", "--transaction-state-partitions", "2",
        ],
        etcd_unsafe_no_fsync=True,
        tls=True,
        tls_client_auth="required",
        ca_dir=data_dir / "ca",
        security_args=["--principal-mapping-rules", MAPPING],
        startup_timeout=120,
    ) as c:  # fmt: skip
        yield c


def _sec(issued: Issued, ca: Path | None = None) -> ClientSecurity:
    return ClientSecurity(str(ca or issued.ca), str(issued.cert), str(issued.key))


def _metadata(address: str, security: ClientSecurity) -> metadata_pb2.MetadataResponse:
    with sync_channel(address, security) as ch:
        return broker_pb2_grpc.BrokerStub(ch).Metadata(metadata_pb2.MetadataRequest(), timeout=10)


def _refused(address: str, security: ClientSecurity) -> errors.HeadwaterError:
    """The typed error of a Metadata call that must fail at the TLS handshake."""
    with pytest.raises(grpc.RpcError) as info:
        _metadata(address, security)
    exc = errors.from_rpc_error(info.value)
    assert isinstance(exc, errors.NetworkError), exc
    return exc


async def _end(cluster: LocalCluster, tp: TopicPartition) -> int:
    async with AsyncConsumer(cluster.bootstrap, security=cluster.client_security()) as c:
        return (await c.end_offsets([tp]))[tp]


def test_produce_replicate_consume_and_group_over_tls(tls_cluster: LocalCluster) -> None:
    sec = tls_cluster.client_security()
    assert sec is not None and sec.tls
    tp = TopicPartition(TOPIC, 0)

    async def run() -> None:
        async with AsyncAdminClient(tls_cluster.bootstrap, security=sec) as admin:
            await admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "3"})
        producer = AsyncProducer(tls_cluster.bootstrap, acks="all", security=sec, linger_ms=0)
        await producer.start()
        try:
            futures = [await producer.send(TOPIC, f"v{i}".encode(), partition=0) for i in range(20)]
            offsets = [(await f).offset for f in futures]
        finally:
            await producer.close()
        assert offsets == list(range(20))  # acks=all, min ISR 3: both followers replicated

        consumer = AsyncConsumer(
            tls_cluster.bootstrap,
            group_id="tls-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            security=sec,
        )
        consumer.subscribe([TOPIC])
        got: list[bytes] = []
        try:
            deadline = asyncio.get_running_loop().time() + 60
            while len(got) < 20:
                assert asyncio.get_running_loop().time() < deadline, f"consumed {len(got)}"
                got += [r.value for r in await consumer.poll(timeout_ms=500)]
            await consumer.commit()
            assert (await consumer.committed([tp]))[tp] == 20
            assert consumer.generation >= 1
        finally:
            await consumer.close()
        assert got == [f"v{i}".encode() for i in range(20)]

    asyncio.run(run())
    # every broker answers over TLS, knows the 3 brokers, and has all 3 replicas in the ISR
    for proc in tls_cluster.brokers.values():
        md = _metadata(proc.address, sec)
        assert {b.broker_id for b in md.brokers} == {1, 2, 3}
        (state,) = next(t for t in md.topics if t.name == TOPIC).partitions
        assert sorted(state.isr) == [1, 2, 3]


def test_plaintext_client_to_tls_port_fails_and_appends_nothing(
    tls_cluster: LocalCluster,
) -> None:
    tp = TopicPartition(TOPIC, 0)
    before = asyncio.run(_end(tls_cluster, tp))
    with grpc.insecure_channel(tls_cluster.bootstrap) as ch, pytest.raises(grpc.RpcError) as info:
        broker_pb2_grpc.BrokerStub(ch).Metadata(metadata_pb2.MetadataRequest(), timeout=5)
    assert isinstance(errors.from_rpc_error(info.value), errors.NetworkError)

    async def produce_plaintext() -> None:
        producer = AsyncProducer(
            tls_cluster.bootstrap,
            security=ClientSecurity(),  # explicit plaintext
            linger_ms=0,
            request_timeout_ms=2_000,
            delivery_timeout_ms=4_000,
            max_block_ms=4_000,
        )
        try:
            await producer.start()
            await (await producer.send(TOPIC, b"plaintext", partition=0))
        finally:
            await producer.close()

    with pytest.raises(errors.HeadwaterError) as exc:
        asyncio.run(produce_plaintext())
    assert exc.value.retriable  # a network / timeout error, not a server verdict
    assert asyncio.run(_end(tls_cluster, tp)) == before


def test_mtls_refuses_missing_foreign_and_expired_client_certificates(
    tls_cluster: LocalCluster, tmp_path: Path
) -> None:
    assert tls_cluster.ca is not None
    ca_pem = tls_cluster.ca.cert_path
    address = tls_cluster.bootstrap
    # the cluster's own client certificate works
    assert _metadata(address, tls_cluster.client_security() or ClientSecurity()).brokers
    # no client certificate
    _refused(address, ClientSecurity(ca_file=str(ca_pem)))
    # a client certificate signed by another CA (bad CA)
    other = CertificateAuthority(tmp_path / "other-ca", name="Other CA")
    _refused(address, _sec(other.issue("mallory"), ca=ca_pem))
    # a client that does not trust the cluster's CA
    _refused(address, _sec(other.issue("eve")))
    # an expired client certificate from the right CA
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    _refused(address, _sec(tls_cluster.ca.issue("expired-client", not_after=past)))
    # and through the client API: a typed error
    with pytest.raises(errors.HeadwaterError) as exc:
        asyncio.run(_list_topics(address, ClientSecurity(ca_file=str(ca_pem))))
    assert exc.value.retriable


async def _list_topics(address: str, sec: ClientSecurity) -> None:
    async with AsyncAdminClient(address, security=sec, request_timeout_ms=3_000) as admin:
        await admin.list_topics()


def test_mtls_principal_is_the_mapped_certificate_subject(tls_cluster: LocalCluster) -> None:
    """The quota path sees the principal: the broker's per-(user, client-id) request-time
    metric names the mapped subject of the client certificate (CN=Alice,O=Headwater -> alice)."""
    assert tls_cluster.ca is not None
    sec = _sec(tls_cluster.ca.issue("alice", common_name="Alice"))
    client_id = "mtls-principal-probe"

    async def produce() -> None:
        producer = AsyncProducer(tls_cluster.bootstrap, security=sec, client_id=client_id)
        await producer.start()
        try:
            await (await producer.send(TOPIC, b"from alice", partition=0))
        finally:
            await producer.close()

    asyncio.run(produce())
    seen = {
        proc.name: metric(
            proc.metrics_url,
            "headwater_broker_quota_request_time_seconds_total",
            user="alice",
            client_id=client_id,
        )
        for proc in tls_cluster.brokers.values()
    }
    assert any(v for v in seen.values()), seen
    for proc in tls_cluster.brokers.values():
        anon = metric(
            proc.metrics_url,
            "headwater_broker_quota_request_time_seconds_total",
            user="ANONYMOUS",
            client_id=client_id,
        )
        assert anon is None, proc.name


def test_etcd_over_tls(tls_cluster: LocalCluster) -> None:
    assert tls_cluster.ca is not None
    client = tls_cluster.ca.issued("client")
    endpoint = tls_cluster.etcd.endpoint

    async def run() -> None:
        etcd = await hetcd.Etcd.connect(
            endpoint, ca=str(client.ca), cert=str(client.cert), key=str(client.key)
        )
        try:
            await etcd.put("/test/tls", b"ok")
            got = await etcd.get("/test/tls")
            assert got is not None and got[0] == b"ok"
            # the services registered through TLS too
            assert (await etcd.get_prefix("/headwater/brokers/ids/")).items
        finally:
            await etcd.close()
        for kwargs in ({}, {"ca": str(client.ca)}):  # plaintext; TLS without a certificate
            with pytest.raises(hetcd.EtcdError):
                bad = await hetcd.Etcd.connect(endpoint, timeout=3, **kwargs)
                await bad.close()

    asyncio.run(run())


def test_wrong_server_hostname_is_refused_unless_overridden(tmp_path: Path) -> None:
    """A server whose certificate names another host is refused by a client verifying the
    host it dials; ``server_hostname_override`` (for port-forwards) names the certified one."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from headwater.platform.security_flags import ServerSecurity
    from headwater.platform.server import start_server

    ca = CertificateAuthority(tmp_path)
    wrong = ca.issue("wrong-host", hosts=("wrong.invalid",))

    async def run() -> None:
        server = await start_server(
            host="127.0.0.1",
            port=0,
            register=[],
            service="tls-hostname-test",
            metrics_port=None,
            security=ServerSecurity(tls_cert=wrong.cert, tls_key=wrong.key),
        )
        try:
            for sec, ok in (
                (ClientSecurity(ca_file=str(ca.cert_path)), False),
                (
                    ClientSecurity(
                        ca_file=str(ca.cert_path), server_hostname_override="wrong.invalid"
                    ),
                    True,
                ),
            ):
                ch = grpc.aio.secure_channel(
                    f"127.0.0.1:{server.port}",
                    sec.channel_credentials(),
                    options=sec.channel_options(),
                )
                try:
                    stub = health_pb2_grpc.HealthStub(ch)
                    call = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
                    if ok:
                        assert (await call).status == health_pb2.HealthCheckResponse.SERVING
                    else:
                        with pytest.raises(grpc.RpcError) as info:
                            await call
                        assert isinstance(errors.from_rpc_error(info.value), errors.NetworkError)
                finally:
                    await ch.close()
        finally:
            await server.stop(0)

    asyncio.run(run())
