"""Broker registration against the real etcd: duplicate ids are refused, a lost lease leads
to a new registration with a new epoch, and the old epoch is fenced."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from broker_helpers import ActingController, BrokerProc, read_registration

from headwater.dev.etcd_server import EtcdServer
from headwater.dev.procs import wait_until
from headwater.platform import etcd as hetcd
from headwater.v1.errors_pb2 import ErrorCode
from services.broker.registration import Registration, RegistrationConflictError


def test_a_second_registration_of_the_same_id_fails_loudly(etcd: str) -> None:
    async def run() -> None:
        client = await hetcd.Etcd.connect(etcd)
        epochs: list[int | None] = []
        first = Registration(
            client, 3, host="127.0.0.1", port=1, rack="r1", metrics_url="", on_epoch=epochs.append
        )
        second = Registration(
            client, 3, host="127.0.0.1", port=2, rack="", metrics_url="", on_epoch=epochs.append
        )
        try:
            epoch = await first.register()
            with pytest.raises(RegistrationConflictError, match="already registered"):
                await second.register(wait_s=0.3)
            assert epochs == [epoch]
            got = await client.get("/headwater/brokers/ids/3")
            assert got is not None and got[1].create_revision == epoch and b'"port": 1' in got[0]
        finally:
            await first.close()
            assert await client.get("/headwater/brokers/ids/3") is None
            await client.close()

    asyncio.run(run())


@pytest.fixture
def lone_broker(etcd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    base = tmp_path_factory.mktemp("lease")
    proc = BrokerProc(5, base / "data", etcd, base / "broker.log")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _revoke_lease_of(endpoint: str, key: str) -> None:
    async def run() -> None:
        client = await hetcd.Etcd.connect(endpoint)
        try:
            got = await client.get(key)
            assert got is not None and got[1].lease_id
            await client.revoke_lease(got[1].lease_id)
        finally:
            await client.close()

    asyncio.run(run())


def test_lost_lease_re_registers_with_a_new_epoch(lone_broker: BrokerProc) -> None:
    c = ActingController(lone_broker)
    try:
        c.create_topic("lease-topic")
        old = lone_broker.epoch()
        _revoke_lease_of(lone_broker.etcd, "/headwater/brokers/ids/5")

        def re_registered() -> bool:
            reg = read_registration(lone_broker.etcd, 5)
            return reg is not None and reg[1] > old

        wait_until(re_registered, timeout=20, what="re-registration", watch=[lone_broker.child])  # type: ignore[list-item]
        assert c.update_metadata(broker_epoch=old).error_code == ErrorCode.STALE_BROKER_EPOCH
        assert c.update_metadata().error_code == ErrorCode.NONE  # the new epoch is accepted
    finally:
        c.close()


def test_session_timeout_sets_the_lease_ttl(
    etcd_server: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """--session-timeout-s is the TTL of the registration lease (how fast a crash is seen);
    the default is 10 s."""
    base = tmp_path_factory.mktemp("session")
    endpoint = etcd_server.endpoint
    quick = BrokerProc(
        8, base / "q", endpoint, base / "q.log", extra_args=["--session-timeout-s", "3"]
    )
    default = BrokerProc(9, base / "d", endpoint, base / "d.log")
    quick.start()
    try:
        default.start()
        try:

            async def ttls() -> list[int]:
                client = await hetcd.Etcd.connect(endpoint)
                try:
                    out = []
                    for bid in (8, 9):
                        got = await client.get(f"/headwater/brokers/ids/{bid}")
                        assert got is not None and got[1].lease_id
                        out.append(await client.lease_granted_ttl(got[1].lease_id))
                    return out
                finally:
                    await client.close()

            assert asyncio.run(ttls()) == [3, 10]
        finally:
            default.stop()
    finally:
        quick.stop()
