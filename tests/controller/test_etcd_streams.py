"""headwater.platform.etcd's grpc.aio client against real etcd servers: watches ending on
compaction, on an etcd restart (and a new watch on the same, reconnected client), on close and
on cancel; a lease lost while etcd is down and a new one kept alive after; TLS with client
certificates; RPC deadlines against a stopped etcd, and a caller's cancellation."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.dev.etcd_server import EtcdServer, find_etcd
from headwater.dev.tls import CertificateAuthority
from headwater.platform import etcd as hetcd
from tests.helpers.wait import async_wait_for, wait_for


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 90))


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """An etcd of the test's own (it is killed, stopped or restarted), stopped by PID."""
    server = EtcdServer(tmp_path / "etcd", tmp_path / "etcd.log", unsafe_no_fsync=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _compact(endpoint: str, revision: int) -> None:
    etcdctl = Path(find_etcd()).with_name("etcdctl")
    subprocess.run(
        [str(etcdctl), f"--endpoints=http://{endpoint}", "compaction", str(revision)],
        check=True,
        capture_output=True,
        timeout=30,
    )


def test_watch_from_a_compacted_revision_ends_with_the_compaction(etcd: str) -> None:
    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            first = await c.put("/test/c/k", "1")
            await c.put("/test/c/k", "2")
            last = await c.put("/test/c/k", "3")
            _compact(etcd, last)
            with pytest.raises(hetcd.EtcdWatchError) as info:
                watch = await c.watch_prefix("/test/c/", start_revision=first)
                await asyncio.wait_for(watch.__anext__(), 10)
            assert info.value.compact_revision == last
            # a watch from a revision still kept works on the same client
            watch = await c.watch_prefix("/test/c/", start_revision=last)
            event = await asyncio.wait_for(watch.__anext__(), 10)
            assert (event.key, event.value, event.mod_revision) == ("/test/c/k", b"3", last)
            await watch.cancel()

    run(body())


def test_watch_ends_when_etcd_dies_and_a_new_one_resumes_once_it_is_back(
    own_etcd: EtcdServer,
) -> None:
    """The watch's stream breaks with etcd (EtcdWatchError after the events delivered); the
    same client reconnects once etcd is back, and a watch from the last revision seen + 1
    delivers what changed meanwhile and after, without a gap."""

    async def body() -> None:
        async with await hetcd.Etcd.connect(own_etcd.endpoint, timeout=2) as c:
            watch = await c.watch_prefix("/test/r/")
            rev = await c.put("/test/r/1", "a")
            event = await asyncio.wait_for(watch.__anext__(), 10)
            assert event.mod_revision == rev
            own_etcd.kill9()
            with pytest.raises(hetcd.EtcdWatchError):
                await asyncio.wait_for(watch.__anext__(), 30)
            own_etcd.restart()

            async def written() -> int:
                return await c.put("/test/r/2", "b")

            rev2 = await async_wait_for(written, timeout=30, what="a put after the restart")
            resumed = await c.watch_prefix("/test/r/", start_revision=event.mod_revision + 1)
            rev3 = await c.put("/test/r/3", "c")
            got = [await asyncio.wait_for(resumed.__anext__(), 10) for _ in range(2)]
            assert [(e.key, e.mod_revision) for e in got] == [
                ("/test/r/2", rev2),
                ("/test/r/3", rev3),
            ]
            await resumed.cancel()

    run(body())


def test_close_ends_watches_and_later_calls_fail(etcd: str) -> None:
    async def body() -> None:
        c = await hetcd.Etcd.connect(etcd)
        watch = await c.watch_prefix("/test/close/")
        pending = asyncio.ensure_future(watch.__anext__())
        await asyncio.wait({pending}, timeout=0.2)  # waiting on the stream
        assert not pending.done()
        await c.close()
        with pytest.raises(hetcd.EtcdWatchError):
            await asyncio.wait_for(pending, 10)
        with pytest.raises(hetcd.EtcdError):
            await c.put("/test/close/k", "v")
        with pytest.raises(hetcd.EtcdError):
            await c.watch_prefix("/test/close/")
        await c.close()  # idempotent

    run(body())


def test_cancel_stops_an_iteration_in_progress(etcd: str) -> None:
    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            watch = await c.watch_prefix("/test/cancel/")
            got: list[str] = []

            async def consume() -> None:
                async for event in watch:
                    got.append(event.key)

            consumer = asyncio.ensure_future(consume())
            await c.put("/test/cancel/1", "x")
            await async_wait_for(_true_when(lambda: got), timeout=10, what="the first event")
            await watch.cancel()
            await asyncio.wait_for(consumer, 10)  # ended by StopAsyncIteration, no error
            assert got == ["/test/cancel/1"]
            await watch.cancel()  # idempotent

    run(body())


def _true_when(pred: Any) -> Any:
    async def check() -> bool:
        return bool(pred())

    return check


def test_lease_lost_while_etcd_is_down_and_a_new_one_kept_alive_after(
    own_etcd: EtcdServer,
) -> None:
    """etcd down past the TTL: the keeper reports the loss once (on_lost on the loop). Back
    up, the same client grants a new lease whose keepalive (on the reconnected channel)
    keeps it past its TTL, while the old lease, no longer refreshed, is gone."""

    async def body() -> None:
        async with await hetcd.Etcd.connect(own_etcd.endpoint, timeout=2) as c:
            lost: list[int] = []
            old = await c.grant_lease(2, on_lost=lambda: lost.append(old.id))
            await c.put("/test/l/old", "v", lease=old)
            own_etcd.kill9()
            await asyncio.wait_for(old.lost.wait(), 20)
            assert lost == [old.id]
            await old.stop()
            own_etcd.restart()

            async def granted() -> hetcd.LeaseKeeper:
                return await c.grant_lease(2)

            new = await async_wait_for(granted, timeout=30, what="a lease after the restart")
            granted_at = asyncio.get_running_loop().time()
            await c.put("/test/l/new", "v", lease=new)

            async def old_gone() -> bool:
                return await c.lease_granted_ttl(old.id) == -1

            await async_wait_for(old_gone, timeout=30, what="the old lease to expire")
            assert await c.get("/test/l/old") is None
            # the new lease's key stays while its keeper refreshes it, well past its TTL
            loop = asyncio.get_running_loop()
            while loop.time() - granted_at < 3 * new.ttl:
                assert await c.get("/test/l/new") is not None
                await asyncio.sleep(0.2)
            assert not new.lost.is_set()
            await new.revoke()
            assert await c.get("/test/l/new") is None

    run(body())


def test_tls_with_client_certificates(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "ca")
    server_cert, client_cert = ca.issue("etcd"), ca.issue("client")
    other = CertificateAuthority(tmp_path / "other", name="Another CA").issue("stranger")
    server = EtcdServer(
        tmp_path / "etcd",
        tmp_path / "etcd.log",
        unsafe_no_fsync=True,
        tls=server_cert,
        client_tls=client_cert,
    )
    server.start()
    tls = {"ca": str(ca.cert_path), "cert": str(client_cert.cert), "key": str(client_cert.key)}
    try:

        async def body() -> None:
            async with await hetcd.Etcd.connect(server.endpoint, **tls) as c:
                rev = await c.put("/test/tls", "v")
                watch = await c.watch_prefix("/test/tls")
                lease = await c.grant_lease(5)
                await c.put("/test/tls", "w", lease=lease)
                event = await asyncio.wait_for(watch.__anext__(), 10)
                assert (event.value, event.mod_revision > rev) == (b"w", True)
                await lease.revoke()
                await watch.cancel()
            # etcd requires a client certificate, and one its CA signed
            with pytest.raises(hetcd.EtcdError):
                await hetcd.Etcd.connect(server.endpoint, ca=str(ca.cert_path), timeout=2)
            with pytest.raises(hetcd.EtcdError):
                await hetcd.Etcd.connect(
                    server.endpoint,
                    ca=str(ca.cert_path),
                    cert=str(other.cert),
                    key=str(other.key),
                    timeout=2,
                )
            # plaintext to a TLS etcd, and certificate files that are not there
            with pytest.raises(hetcd.EtcdError):
                await hetcd.Etcd.connect(server.endpoint, timeout=2)
            with pytest.raises(hetcd.EtcdError):
                await hetcd.Etcd.connect(server.endpoint, ca=str(tmp_path / "missing.pem"))

        run(body())
    finally:
        server.stop()


def _all_threads_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is in state T (stopped), from /proc/PID/task/*/stat."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            return False
    return bool(states) and all(st in ("T", "t") for st in states)


def test_deadline_against_a_stopped_etcd_and_a_callers_cancellation(
    own_etcd: EtcdServer,
) -> None:
    """etcd stopped (SIGSTOP: the connection stays up, nothing answers): a call ends at its
    deadline with EtcdUnavailableError, a watch's creation too; a caller cancelling its
    call gets CancelledError (not an EtcdError). Resumed, the same client works."""

    async def body() -> None:
        async with await hetcd.Etcd.connect(own_etcd.endpoint, timeout=1) as c:
            await c.put("/test/stop", "v")
            os.kill(own_etcd.pid, signal.SIGSTOP)
            try:
                # kill() returns before every thread of etcd has stopped: under load a call
                # sent at once could still be answered
                wait_for(
                    lambda: _all_threads_stopped(own_etcd.pid),
                    timeout=10,
                    what="every etcd thread stopped",
                )
                with pytest.raises(hetcd.EtcdUnavailableError):
                    await c.get("/test/stop")
                with pytest.raises(hetcd.EtcdUnavailableError):
                    await c.watch_prefix("/test/stop")
                call = asyncio.ensure_future(c.get("/test/stop"))
                await asyncio.wait({call}, timeout=0.2)  # in flight, unanswered
                assert not call.done()
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
            finally:
                os.kill(own_etcd.pid, signal.SIGCONT)
            got = await c.get("/test/stop")
            assert got is not None and got[0] == b"v"

    run(body())


def test_concurrent_calls_on_one_client(etcd: str) -> None:
    async def body() -> None:
        async with await hetcd.Etcd.connect(etcd) as c:
            revs = await asyncio.gather(*(c.put(f"/test/many/{i:03d}", str(i)) for i in range(100)))
            assert len(set(revs)) == 100
            snap = await c.get_prefix("/test/many/")
            assert [kv.value for kv in snap.items] == [str(i).encode() for i in range(100)]
            assert snap.revision == max(revs)

    run(body())
