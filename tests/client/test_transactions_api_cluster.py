"""The transactional producer and read_committed consumer against real processes
(etcd, controller, broker, coordinator with the transaction coordinator)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from headwater import errors
from headwater.client import (
    AsyncAdminClient,
    AsyncConsumer,
    AsyncProducer,
    Producer,
    TopicPartition,
)
from headwater.client.types import ConsumerRecord
from headwater.dev.cluster import LocalCluster

T = TypeVar("T")
ARGS = ["--offsets-topic-partitions", "2", "--transaction-state-partitions", "2"]
ARGS += ["--offsets-topic-replication-factor", "1", "--lease-ttl", "2"]


@pytest.fixture(scope="module")
def tcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir: Path = tmp_path_factory.mktemp("txn-client")
    with LocalCluster(
        data_dir,
        brokers=1,
        controllers=1,
        coordinators=1,
        coordinator_args=ARGS,
        etcd_unsafe_no_fsync=True,
    ) as c:
        yield c


def run(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(fn())


async def read(
    boot: str, tps: list[TopicPartition], level: str, expected: int
) -> tuple[list[ConsumerRecord], dict[TopicPartition, int]]:
    out: list[ConsumerRecord] = []
    async with AsyncConsumer(boot, auto_offset_reset="earliest", isolation_level=level) as c:
        c.assign(tps)
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            out.extend(await c.poll(timeout_ms=300, max_records=10_000))
        out.extend(await c.poll(timeout_ms=500, max_records=10_000))
        positions = {tp: await c.position(tp) for tp in tps}
    return out, positions


def test_commit_and_abort_seen_by_read_committed_and_read_uncommitted(
    tcluster: LocalCluster,
) -> None:
    boot = tcluster.bootstrap
    topic = "txn-out"
    tps = [TopicPartition(topic, p) for p in range(2)]

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic(topic, 2, 1, {})
        async with AsyncProducer(boot, transactional_id="client-tx-1", linger_ms=1) as p:
            with pytest.raises(errors.InvalidTxnStateError):
                await p.send(topic, b"too early", partition=0)
            await p.init_transactions()
            p.begin_transaction()
            for i in range(10):
                await p.send(topic, b"c1-%d" % i, partition=i % 2)
            await p.commit_transaction()
            p.begin_transaction()
            aborted = [await p.send(topic, b"a-%d" % i, partition=i % 2) for i in range(6)]
            await asyncio.gather(*aborted)  # appended, then aborted
            await p.abort_transaction()
            p.begin_transaction()
            for i in range(4):
                await p.send(topic, b"c2-%d" % i, partition=i % 2)
            await p.commit_transaction()
        committed = sorted([b"c1-%d" % i for i in range(10)] + [b"c2-%d" % i for i in range(4)])
        rc, rc_pos = await read(boot, tps, "read_committed", 14)
        assert sorted(r.value or b"" for r in rc) == committed
        ru, ru_pos = await read(boot, tps, "read_uncommitted", 20)
        assert len(ru) == 20 and all(r.value is not None for r in ru)  # no marker delivered
        # 20 data records + 3 markers per partition: positions are past every marker
        assert rc_pos == ru_pos
        assert sum(rc_pos.values()) == 20 + 3 * 2

    run(body)


def test_offsets_committed_inside_a_transaction(tcluster: LocalCluster) -> None:
    boot = tcluster.bootstrap
    src = TopicPartition("txn-src", 0)

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic(src.topic, 1, 1, {})
        async with AsyncProducer(boot, transactional_id="client-tx-2", linger_ms=1) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send(src.topic, b"x", partition=0)
            await p.send_offsets_to_transaction({src: 7}, "copier-group")
            await p.commit_transaction()
            p.begin_transaction()
            await p.send_offsets_to_transaction({src: 9}, "copier-group")
            await p.abort_transaction()
        async with AsyncConsumer(
            boot, group_id="copier-group", isolation_level="read_committed"
        ) as c:
            assert await c.committed([src]) == {src: 7}

    run(body)


def test_a_new_incarnation_fences_the_old_producer(tcluster: LocalCluster) -> None:
    boot = tcluster.bootstrap
    topic = "txn-fence"

    async def body() -> None:
        async with AsyncAdminClient(boot) as admin:
            await admin.create_topic(topic, 1, 1, {})
        old = AsyncProducer(boot, transactional_id="client-tx-3", linger_ms=1)
        new = AsyncProducer(boot, transactional_id="client-tx-3", linger_ms=1)
        try:
            await old.init_transactions()
            old.begin_transaction()
            await (await old.send(topic, b"zombie", partition=0))
            await new.init_transactions()  # bumps the epoch, aborts old's transaction
            with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError)):
                await old.commit_transaction()
            with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError)):
                await old.send(topic, b"after", partition=0)
            new.begin_transaction()
            await new.send(topic, b"live", partition=0)
            await new.commit_transaction()
        finally:
            await old.close()
            await new.close()
        rc, _pos = await read(boot, [TopicPartition(topic, 0)], "read_committed", 1)
        assert [r.value for r in rc] == [b"live"]

    run(body)


def test_cli_consume_isolation_level(tcluster: LocalCluster) -> None:
    topic = "txn-cli"

    async def body() -> None:
        async with AsyncAdminClient(tcluster.bootstrap) as admin:
            await admin.create_topic(topic, 1, 1, {})
        async with AsyncProducer(tcluster.bootstrap, transactional_id="client-tx-4") as p:
            await p.init_transactions()
            p.begin_transaction()
            await (await p.send(topic, b"dropped", partition=0))
            await p.abort_transaction()
            p.begin_transaction()
            await p.send(topic, b"kept", partition=0)
            await p.commit_transaction()

    run(body)
    env = {**os.environ, "HEADWATER_BOOTSTRAP": tcluster.bootstrap}
    lines = {}
    for level in ("read_committed", "read_uncommitted"):
        cmd = [sys.executable, "-m", "headwater.cli.main", "consume", topic, "--from-beginning"]
        cmd += ["--isolation-level", level, "--timeout-ms", "1500"]
        proc = subprocess.run(
            cmd,
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr.decode()
        lines[level] = proc.stdout.decode().split()
    assert lines == {"read_committed": ["kept"], "read_uncommitted": ["dropped", "kept"]}


def test_sync_producer_facade_transactions(tcluster: LocalCluster) -> None:
    topic = "txn-sync"

    async def setup() -> None:
        async with AsyncAdminClient(tcluster.bootstrap) as admin:
            await admin.create_topic(topic, 1, 1, {})

    run(setup)
    with Producer(tcluster.bootstrap, transactional_id="client-tx-5") as p:
        p.init_transactions()
        p.begin_transaction()
        f = p.send(topic, b"one", partition=0)
        p.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "sync-group")
        p.commit_transaction()
        assert f.result(5).offset == 0
        p.begin_transaction()
        p.send(topic, b"two", partition=0)
        p.abort_transaction()

    async def check() -> None:
        rc, _pos = await read(tcluster.bootstrap, [TopicPartition(topic, 0)], "read_committed", 1)
        assert [r.value for r in rc] == [b"one"]

    run(check)


def test_admin_and_cli_list_and_describe_transactions(tcluster: LocalCluster) -> None:
    """An open transaction is listed as Ongoing with its partition; after commit the id is
    CompleteCommit with no open partition; an unknown id is a typed error."""
    topic = "txn-admin"

    async def body() -> None:
        async with AsyncAdminClient(tcluster.bootstrap) as admin:
            await admin.create_topic(topic, 2, 1, {})
            async with AsyncProducer(tcluster.bootstrap, transactional_id="admin-tx") as p:
                await p.init_transactions()
                p.begin_transaction()
                await (await p.send(topic, b"v", partition=1))
                (d,) = await admin.describe_transactions(["admin-tx"])
                assert (d.state, d.partitions) == ("Ongoing", (TopicPartition(topic, 1),))
                listed = {t.transactional_id: t.state for t in await admin.list_transactions()}
                assert listed["admin-tx"] == "Ongoing"
                assert [t.transactional_id for t in await admin.list_transactions(["Ongoing"])] == [
                    "admin-tx"
                ]
                await p.commit_transaction()
            (d,) = await admin.describe_transactions(["admin-tx"])
            assert (d.state, d.partitions) == ("CompleteCommit", ())
            with pytest.raises(errors.HeadwaterError):
                await admin.describe_transactions(["no-such-id"])

    run(body)
    env = {**os.environ, "HEADWATER_BOOTSTRAP": tcluster.bootstrap}
    cmd = [sys.executable, "-m", "headwater.cli.main", "--output", "json", "transactions"]
    out = subprocess.run(
        [*cmd, "describe", "admin-tx"], capture_output=True, env=env, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr.decode()
    assert json.loads(out.stdout)["state"] == "CompleteCommit"
    out = subprocess.run([*cmd, "list"], capture_output=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr.decode()
    assert {"transactional_id": "admin-tx"}.items() <= next(
        t for t in json.loads(out.stdout) if t["transactional_id"] == "admin-tx"
    ).items()
