"""The machine's raw ceilings, measured in the same run as Headwater's figures.

* page-cache write bandwidth, two ways, with 1 MiB ``os.write`` calls of one reused buffer
  (no fsync): *growing* — one pass writing as many bytes as the produce benchmarks append into
  one new file, which is what a broker's log does (the kernel must find fresh pages, reclaiming
  older cache); *rewrite* — best of three passes of 1 GiB into a file deleted after each pass,
  so later passes reuse the pages just freed (the optimistic figure); *sustained* — the last
  GiB of a 4 GiB pass, once every new page must be faulted in by the VM's host;
* Python gRPC loopback ceilings between two processes, with opaque 1 MiB messages and no
  protobuf: a unary call with 8 in flight (the shape of Produce) and a server stream (the
  shape of Fetch).

    python bench/ceilings.py [--dir DIR]   # prints JSON
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

MIB = 1024 * 1024
_METHOD_UNARY = "/ceiling.Sink/Put"
_METHOD_STREAM = "/ceiling.Source/Get"


def _write_pass(path: Path, total_mib: int, untimed_mib: int = 0) -> float:
    """Seconds taken by the last ``total_mib - untimed_mib`` of ``total_mib`` 1 MiB writes of one
    reused buffer into the new file ``path`` (no fsync; deleted after)."""
    buf = os.urandom(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(untimed_mib):
            os.write(fd, buf)
        t0 = time.perf_counter()
        for _ in range(total_mib - untimed_mib):
            os.write(fd, buf)
        return time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()


def page_cache_write_mb_s(directory: Path, total_mib: int = 1024, repeats: int = 3) -> float:
    """Best of ``repeats`` passes writing ``total_mib`` MiB into a new file (deleted after)."""
    return max(
        total_mib / _write_pass(directory / f"pagecache-{i}.bin", total_mib) for i in range(repeats)
    )


def page_cache_write_sustained_mb_s(directory: Path, total_mib: int = 4096) -> float:
    """MB/s of the last GiB of one pass writing ``total_mib`` MiB into a new file (deleted
    after). On this project's VMs (Firecracker, virtio-balloon free page reporting) memory the
    guest freed is handed back to the host, and a page touched again is faulted in by the host
    at ~0.35-0.4 GB/s: page cache, tmpfs and anonymous memory alike, once the few GiB the host
    still backs are used. A long run of 1 KiB produce units meets that rate (the *growing* pass
    of 2 GiB mostly does not); docs/benchmarks.md "The VM's memory under the 1 KiB rows"."""
    tail_mib = min(1024, total_mib)
    elapsed = _write_pass(directory / "pagecache-sustained.bin", total_mib, total_mib - tail_mib)
    return tail_mib * MIB / 1e6 / elapsed


async def _serve(port_file: Path) -> None:
    payload = os.urandom(MIB)

    async def put(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b""

    async def get(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for _ in range(int(request.decode())):
            yield payload

    handlers = grpc.method_handlers_generic_handler(
        "ceiling.Sink", {"Put": grpc.unary_unary_rpc_method_handler(put)}
    )
    stream_handlers = grpc.method_handlers_generic_handler(
        "ceiling.Source", {"Get": grpc.unary_stream_rpc_method_handler(get)}
    )
    opts = [
        ("grpc.max_receive_message_length", 64 * MIB),
        ("grpc.max_send_message_length", 64 * MIB),
    ]
    server = grpc.aio.server(options=opts)
    server.add_generic_rpc_handlers((handlers, stream_handlers))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    port_file.write_text(str(port))
    await server.wait_for_termination()


async def _client(port: int, total_mib: int) -> dict[str, float]:
    opts = [
        ("grpc.max_receive_message_length", 64 * MIB),
        ("grpc.max_send_message_length", 64 * MIB),
    ]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
        put = ch.unary_unary(_METHOD_UNARY)
        get = ch.unary_stream(_METHOD_STREAM)
        payload = os.urandom(MIB)
        await put(payload)  # warm up the connection
        sem = asyncio.Semaphore(8)

        async def one() -> None:
            async with sem:
                await put(payload)

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(total_mib)))
        unary = total_mib / (time.perf_counter() - t0)

        t0 = time.perf_counter()
        received = 0
        async for msg in get(str(total_mib).encode()):
            received += len(msg)
        stream = received / MIB / (time.perf_counter() - t0)
    return {"grpc_unary_1mib_8_in_flight_mb_s": unary, "grpc_stream_1mib_mb_s": stream}


def grpc_ceilings(total_mib: int = 1024, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run the server in a child process (as the broker is) and measure from this one."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port_file)], env=env or os.environ.copy()
        )
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists() or not port_file.read_text():
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("ceiling server did not start")
                time.sleep(0.05)
            return asyncio.run(_client(int(port_file.read_text()), total_mib))
        finally:
            server.terminate()
            server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--serve", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve))
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = {
            "page_cache_write_growing_mb_s": page_cache_write_mb_s(Path(tmp), 3072, repeats=1),
            "page_cache_rewrite_mb_s": page_cache_write_mb_s(Path(tmp)),
            "page_cache_write_sustained_mb_s": page_cache_write_sustained_mb_s(Path(tmp)),
        }
    result.update(grpc_ceilings())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
