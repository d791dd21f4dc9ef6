"""headwater.platform.etcd against a real etcd server: KV, CAS transactions, leases, watches."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from headwater.dev.etcd_server import EtcdServer
from headwater.platform import etcd as hetcd
from headwater.platform.etcd import lease as etcd_lease
from tests.helpers.wait import async_wait_for


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_get_put_delete_and_meta(etcd: str) -> None:
    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            assert await c.get("/test/a") is None
            rev1 = await c.put("/test/a", "one")
            got = await c.get("/test/a")
            assert got is not None
            value, meta = got
            assert value == b"one"
            assert meta.create_revision == rev1 == meta.mod_revision
            assert meta.version == 1
            rev2 = await c.put("/test/a", b"two")
            got = await c.get("/test/a")
            assert got is not None
            value, meta = got
            assert value == b"two"
            assert meta.create_revision == rev1 and meta.mod_revision == rev2 > rev1
            assert meta.version == 2
            await c.put("/test/b/1", "x")
            await c.put("/test/b/2", "y")
            snap = await c.get_prefix("/test/b/")
            assert [(kv.key, kv.value) for kv in snap.items] == [
                ("/test/b/1", b"x"),
                ("/test/b/2", b"y"),
            ]
            assert snap.revision >= rev2
            assert await c.delete("/test/a") is True
            assert await c.delete("/test/a") is False
            assert await c.delete_prefix("/test/b/") == 2
            assert (await c.get_prefix("/test/b/")).items == []

    run(body())


def test_txn_compare_and_swap(etcd: str) -> None:
    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            # create-if-absent: first wins, second fails and reads the winner
            r1 = await c.txn(
                [hetcd.cmp_absent("/test/k")],
                [hetcd.op_put("/test/k", "first")],
                [hetcd.op_get("/test/k")],
            )
            assert r1.succeeded and r1.revision > 0
            r2 = await c.txn(
                [hetcd.cmp_absent("/test/k")],
                [hetcd.op_put("/test/k", "second")],
                [hetcd.op_get("/test/k")],
            )
            assert not r2.succeeded
            kvs = r2.responses[0]
            assert isinstance(kvs, list) and kvs[0].value == b"first"
            # CAS on mod revision: stale revision fails and writes nothing
            got = await c.get("/test/k")
            assert got is not None
            stale = got[1].mod_revision
            r3 = await c.txn(
                [hetcd.cmp_mod("/test/k", "==", stale)], [hetcd.op_put("/test/k", "v2")]
            )
            assert r3.succeeded
            r4 = await c.txn(
                [hetcd.cmp_mod("/test/k", "==", stale)], [hetcd.op_put("/test/k", "v3")]
            )
            assert not r4.succeeded
            assert (await c.get("/test/k") or (b"",))[0] == b"v2"
            # value comparison + multi-op atomicity
            r5 = await c.txn(
                [hetcd.cmp_value("/test/k", "==", "v2")],
                [hetcd.op_put("/test/x", "1"), hetcd.op_delete("/test/k")],
            )
            assert r5.succeeded and r5.responses == [None, 1]
            assert await c.get("/test/k") is None
            assert (await c.get("/test/x") or (b"",))[0] == b"1"

    run(body())


def test_lease_keepalive_then_loss_on_expiry(etcd: str) -> None:
    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            lost_calls: list[int] = []
            lease = await c.grant_lease(2, on_lost=lambda: lost_calls.append(1))
            await c.put("/test/leased", "v", lease=lease)
            # kept alive past its TTL by the keepalive task
            await asyncio.wait_for(_until_revision_advanced(c, 2.5), 10)
            assert await c.get("/test/leased") is not None
            assert not lease.lost.is_set()
            # stop refreshing: etcd expires the lease and deletes the key
            await lease.stop()
            await _wait(lambda: _absent(c, "/test/leased"), 15)
            # a lease revoked elsewhere is reported lost by its keeper
            lease2 = await c.grant_lease(3, on_lost=lambda: lost_calls.append(2))
            await c.revoke_lease(lease2.id)
            await asyncio.wait_for(lease2.lost.wait(), 10)
            assert lost_calls == [2]
            await lease2.stop()

    run(body())


def _hold_the_loop(seconds: float) -> None:
    """What a handler computing on the event loop does: nothing else runs meanwhile."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


def test_lease_survives_an_event_loop_held_past_its_ttl(etcd: str) -> None:
    """The keepalive runs in its own thread: a loop held for 2.5 TTLs (5 s, lease TTL 2 s)
    does not cost the lease or the keys attached to it."""

    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            lease = await c.grant_lease(2)
            await c.put("/test/held", "v", lease=lease)
            _hold_the_loop(5.0)
            assert await c.get("/test/held") is not None
            assert await c.lease_granted_ttl(lease.id) == 2
            await asyncio.sleep(0)  # let a loss reported meanwhile be delivered
            assert not lease.lost.is_set()
            await lease.revoke()

    run(body())


def test_lease_given_up_when_the_loop_is_wedged(etcd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop that has not run for LOOP_STALL_LIMIT_S is taken for wedged: the thread stops
    refreshing, etcd expires the lease and deletes its keys."""
    monkeypatch.setattr(etcd_lease, "LOOP_STALL_LIMIT_S", 1.0)

    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            lease = await c.grant_lease(2)
            await c.put("/test/wedged", "v", lease=lease)
            _hold_the_loop(6.0)
            await _wait(lambda: _absent(c, "/test/wedged"), 15)
            await lease.stop()

    run(body())


async def _until_revision_advanced(c: hetcd.Etcd, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        await c.get("/test/leased")
        await asyncio.sleep(0.2)


async def _absent(c: hetcd.Etcd, key: str) -> bool:
    return await c.get(key) is None


async def _wait(pred: Callable[[], Awaitable[bool]], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await pred():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.1)


def test_watch_prefix_delivers_put_and_delete(etcd: str) -> None:
    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            before = await c.put("/test/w/0", "old")
            watch = await c.watch_prefix("/test/w/")
            rev = await c.put("/test/w/1", "a")
            await c.put("/test/other", "ignored")
            await c.delete("/test/w/1")
            e1 = await asyncio.wait_for(watch.__anext__(), 10)
            e2 = await asyncio.wait_for(watch.__anext__(), 10)
            assert (e1.kind, e1.key, e1.value, e1.mod_revision) == ("put", "/test/w/1", b"a", rev)
            assert e1.create_revision == rev
            assert (e2.kind, e2.key, e2.value) == ("delete", "/test/w/1", b"")
            await watch.cancel()
            with pytest.raises(StopAsyncIteration):
                await watch.__anext__()
            # replay from a revision
            replay = await c.watch_prefix("/test/w/", start_revision=before)
            first = await asyncio.wait_for(replay.__anext__(), 10)
            assert (first.key, first.value, first.mod_revision) == ("/test/w/0", b"old", before)
            await replay.cancel()

    run(body())


def test_unreachable_endpoint_raises_typed_error() -> None:
    from tests.helpers.ports import free_port

    async def body() -> None:
        with pytest.raises(hetcd.EtcdUnavailableError):
            await hetcd.Etcd.connect(f"127.0.0.1:{free_port()}", timeout=1)
        with pytest.raises(hetcd.EtcdError):
            await hetcd.Etcd.connect("no-port")

    run(body())


def test_client_works_again_once_etcd_is_back(tmp_path: Path) -> None:
    """etcd killed and restarted on its ports (EtcdServer.restart, as headwater dev does): the
    same client's calls fail while it is down and succeed again once it is back (pyetcd used
    to refuse every call for 300 s after one failure: "Trying to use a failed node")."""
    server = EtcdServer(tmp_path / "etcd", tmp_path / "etcd.log", unsafe_no_fsync=True)
    server.start()
    try:

        async def body() -> None:
            async with await hetcd.Etcd.connect(server.endpoint, timeout=2) as c:
                await c.put("/test/restart", "kept")
                endpoint, first_pid = server.endpoint, server.pid
                server.kill9()
                with pytest.raises(hetcd.EtcdUnavailableError):
                    await c.get("/test/restart")
                server.restart()
                assert server.endpoint == endpoint and server.pid != first_pid

                async def read() -> bytes | None:
                    got = await c.get("/test/restart")
                    return got[0] if got else None

                value = await async_wait_for(read, timeout=30, what="a read after the restart")
                assert value == b"kept"

        run(body())
    finally:
        server.stop()
