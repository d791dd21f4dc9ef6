"""etcd client comparison (issue 18 item 6): Headwater's etcd client vs aetcd vs bare grpc.aio.

One run starts one real etcd on 127.0.0.1 (ports picked at run time, ``--unsafe-no-fsync`` so
the clients, not the disk, are what differs; stopped by PID at the end) and measures, for each
client, in a subprocess of its own (aetcd bundles its own generated copy of etcd's
``rpc.proto``, which cannot share one protobuf descriptor pool with Headwater's):

* ``put``, ``get``, ``txn`` (a conditioned transaction: ``mod_revision(key) == last`` -> put),
  at concurrency 1 and 32 (that many tasks on one client, each on a key of its own): ops/s and
  p50/p99 latency of one call;
* ``watch``: ``concurrency`` watches on one prefix while the same client puts ``N`` keys one
  after another; events/s delivered (all watches) and p50/p99 from a put's send to an event's
  arrival.

Clients: ``wrapper`` = :class:`headwater.platform.etcd.Etcd`, Headwater's client (since issue 18
item 6 grpc.aio stubs of etcd's v3 API on the loop; before it, pyetcd on a thread pool of 4
with watch events handed over by ``call_soon_threadsafe`` — measure that one from a checkout
of the commit before the switch); ``aetcd`` = the asyncio client from PyPI (grpc.aio inside);
``grpcaio`` = the same generated stubs Headwater's client uses
(:mod:`headwater.platform.etcd.etcdserverpb`) on a bare grpc.aio channel, with no client
around them: the floor of what a client over grpc.aio costs.

Run: ``nice -n 15 .venv/bin/python bench/etcd_clients.py [--ops 1000] [--events 500]``
(needs ``pip install aetcd``). Prints a Markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from headwater import timeouts

CLIENTS = ("wrapper", "aetcd", "grpcaio")
CONCURRENCY = (1, 32)
OPS = ("put", "get", "txn")


class Client(Protocol):
    """The four operations, for one client library."""

    async def open(self, endpoint: str) -> None: ...
    async def put(self, key: str, value: bytes) -> int: ...  # -> revision
    async def get(self, key: str) -> bytes | None: ...
    async def cas(self, key: str, rev: int, value: bytes) -> int: ...  # -> new revision
    async def watch(self, prefix: str) -> Any: ...  # (async iterator of keys, cancel)
    async def close(self) -> None: ...


class Wrapper(Client):
    async def open(self, endpoint: str) -> None:
        from headwater.platform import etcd as hetcd

        self.h = hetcd
        self.c = await hetcd.Etcd.connect(endpoint)

    async def put(self, key: str, value: bytes) -> int:
        return await self.c.put(key, value)

    async def get(self, key: str) -> bytes | None:
        got = await self.c.get(key)
        return None if got is None else got[0]

    async def cas(self, key: str, rev: int, value: bytes) -> int:
        h = self.h
        res = await self.c.txn([h.cmp_mod(key, "==", rev)], [h.op_put(key, value)])
        assert res.succeeded, key
        return res.revision

    async def watch(self, prefix: str) -> Any:
        w = await self.c.watch_prefix(prefix)

        async def keys() -> Any:
            async for ev in w:
                yield ev.key

        return keys(), w.cancel

    async def close(self) -> None:
        await self.c.close()


class Aetcd(Client):
    async def open(self, endpoint: str) -> None:
        import aetcd

        host, _, port = endpoint.rpartition(":")
        self.c = aetcd.Client(host=host, port=int(port), timeout=10)
        await self.c.connect()

    async def put(self, key: str, value: bytes) -> int:
        return int((await self.c.put(key.encode(), value)).header.revision)

    async def get(self, key: str) -> bytes | None:
        got = await self.c.get(key.encode())
        return None if got is None else bytes(got.value)

    async def cas(self, key: str, rev: int, value: bytes) -> int:
        t = self.c.transactions
        ok, responses = await self.c.transaction(
            compare=[t.mod(key.encode()) == rev],
            success=[t.put(key.encode(), value)],
            failure=[],
        )
        assert ok, key
        return int(responses[0].response_put.header.revision)

    async def watch(self, prefix: str) -> Any:
        w = await self.c.watch_prefix(prefix.encode())

        async def keys() -> Any:
            async for ev in w:
                yield ev.kv.key.decode()

        return keys(), w.cancel

    async def close(self) -> None:
        await self.c.close()


class GrpcAio(Client):
    async def open(self, endpoint: str) -> None:
        import grpc

        from headwater.platform.etcd.etcdserverpb import rpc_pb2, rpc_pb2_grpc

        self.pb = rpc_pb2
        self.channel = grpc.aio.insecure_channel(endpoint)
        self.kv = rpc_pb2_grpc.KVStub(self.channel)
        self.watcher = rpc_pb2_grpc.WatchStub(self.channel)

    async def put(self, key: str, value: bytes) -> int:
        resp = await self.kv.Put(self.pb.PutRequest(key=key.encode(), value=value), timeout=10)
        return int(resp.header.revision)

    async def get(self, key: str) -> bytes | None:
        resp = await self.kv.Range(self.pb.RangeRequest(key=key.encode()), timeout=10)
        return bytes(resp.kvs[0].value) if resp.kvs else None

    async def cas(self, key: str, rev: int, value: bytes) -> int:
        pb = self.pb
        req = pb.TxnRequest(
            compare=[
                pb.Compare(
                    key=key.encode(),
                    target=pb.Compare.MOD,
                    result=pb.Compare.EQUAL,
                    mod_revision=rev,
                )
            ],
            success=[pb.RequestOp(request_put=pb.PutRequest(key=key.encode(), value=value))],
        )
        resp = await self.kv.Txn(req, timeout=10)
        assert resp.succeeded, key
        return int(resp.header.revision)

    async def watch(self, prefix: str) -> Any:
        pb = self.pb
        start = prefix.encode()
        end = start[:-1] + bytes([start[-1] + 1])
        create = pb.WatchRequest(create_request=pb.WatchCreateRequest(key=start, range_end=end))
        done = asyncio.Event()

        async def requests() -> Any:
            yield create
            await done.wait()

        call = self.watcher.Watch(requests())
        first = await call.read()  # the "created" response
        assert first.created

        async def keys() -> Any:
            import grpc

            while (resp := await call.read()) is not grpc.aio.EOF:
                for ev in resp.events:
                    yield ev.kv.key.decode()

        async def cancel() -> None:
            done.set()
            call.cancel()

        return keys(), cancel

    async def close(self) -> None:
        await self.channel.close()


def _summary(lat: list[float], elapsed: float, count: int) -> dict[str, float]:
    lat.sort()
    return {
        "per_s": count / elapsed,
        "p50_ms": statistics.median(lat) * 1e3,
        "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
    }


async def _run_ops(
    n_ops: int, conc: int, op: Callable[[int, int], Awaitable[None]]
) -> dict[str, float]:
    lat: list[float] = []
    counter = iter(range(n_ops))

    async def worker(w: int) -> None:
        for i in counter:
            t0 = time.perf_counter()
            await op(w, i)
            lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(conc)))
    return _summary(lat, time.perf_counter() - t0, n_ops)


async def _bench_client(name: str, endpoint: str, n_ops: int, n_events: int) -> dict[str, Any]:
    classes: dict[str, type[Client]] = {"wrapper": Wrapper, "aetcd": Aetcd, "grpcaio": GrpcAio}
    client = classes[name]()
    await client.open(endpoint)
    out: dict[str, Any] = {}
    value = b"v" * 100
    try:
        for conc in CONCURRENCY:
            base = f"/bench/{name}/c{conc}"
            revs = [await client.put(f"{base}/k{w}", value) for w in range(conc)]

            async def put(w: int, i: int, base: str = base, revs: list[int] = revs) -> None:
                revs[w] = await client.put(f"{base}/k{w}", value)

            async def get(w: int, i: int, base: str = base) -> None:
                assert await client.get(f"{base}/k{w}") == value

            async def txn(w: int, i: int, base: str = base, revs: list[int] = revs) -> None:
                revs[w] = await client.cas(f"{base}/k{w}", revs[w], value)

            for op_name, op in (("put", put), ("get", get), ("txn", txn)):
                await op(0, 0)  # warm up
                out[f"{op_name}/c{conc}"] = await _run_ops(n_ops, conc, op)
            out[f"watch/c{conc}"] = await _bench_watch(client, f"{base}/w/", conc, n_events)
    finally:
        await client.close()
    return out


async def _bench_watch(client: Client, prefix: str, conc: int, n: int) -> dict[str, float]:
    watches = [await client.watch(prefix) for _ in range(conc)]
    sent: dict[str, float] = {}
    lat: list[float] = []

    async def drain(events: Any) -> None:
        got = 0
        async for key in events:
            lat.append(time.perf_counter() - sent[key])
            got += 1
            if got == n:
                return

    t0 = time.perf_counter()
    readers = [asyncio.create_task(drain(events)) for events, _ in watches]
    for i in range(n):
        key = f"{prefix}{i:06d}"
        sent[key] = time.perf_counter()
        await client.put(key, b"e")
    await timeouts.wait_for(asyncio.gather(*readers), 120)
    elapsed = time.perf_counter() - t0
    for _, cancel in watches:
        await cancel()
    return _summary(lat, elapsed, n * conc)


def _worker(args: argparse.Namespace) -> None:
    result = asyncio.run(_bench_client(args.worker, args.endpoint, args.ops, args.events))
    print(json.dumps(result))


def _table(results: dict[str, dict[str, Any]]) -> str:
    names = [c for c in CLIENTS if c in results]
    lines = [
        "| operation | concurrency | " + " | ".join(f"{c} ops/s, p50/p99 ms" for c in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for op in (*OPS, "watch"):
        for conc in CONCURRENCY:
            cells = []
            for c in names:
                r = results[c][f"{op}/c{conc}"]
                cells.append(f"{r['per_s']:,.0f}, {r['p50_ms']:.2f}/{r['p99_ms']:.2f}")
            lines.append(f"| {op} | {conc} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", type=int, default=1000, help="calls per (operation, concurrency)")
    p.add_argument("--events", type=int, default=500, help="puts watched per concurrency")
    p.add_argument(
        "--order", default=",".join(CLIENTS), help="clients in the order they run (comma list)"
    )
    p.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        _worker(args)
        return
    from headwater.dev.etcd_server import EtcdServer

    with tempfile.TemporaryDirectory(prefix="hw-etcd-bench-") as tmp:
        server = EtcdServer(Path(tmp) / "data", Path(tmp) / "etcd.log", unsafe_no_fsync=True)
        server.start()
        try:
            results = {}
            for name in args.order.split(","):
                if name not in CLIENTS:
                    sys.exit(f"unknown client {name!r}; one of {CLIENTS}")
                argv = [sys.executable, __file__, "--worker", name, "--endpoint", server.endpoint]
                argv += ["--ops", str(args.ops), "--events", str(args.events)]
                done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
                if done.returncode != 0:
                    sys.exit(f"{name} failed:\n{done.stderr}")
                results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        finally:
            server.stop()
    print(f"machine: {platform.machine()}, {platform.python_version()}, etcd 3.5.1 no-fsync")
    print(f"ops per cell {args.ops}, watched puts {args.events}, order {args.order}")
    print(_table(results))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
