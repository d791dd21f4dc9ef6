"""Run by tests/packaging/test_client_only.py with the Python of a venv that holds the Headwater
wheel and only the client's declared dependencies (not this repository's venv).

``python client_app.py BOOTSTRAP TOPIC COUNT`` checks that no package of the ``server`` extra
is installed, that the server platform cannot be imported, then creates ``TOPIC`` (2
partitions), produces ``COUNT`` records with :class:`headwater.client.AsyncProducer`, consumes
them back with :class:`headwater.client.AsyncConsumer`, and prints one JSON line: what it found
and what got imported. Exit status 0 only when every check passed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import time

SERVER_ONLY = ["prometheus_client", "cryptography", "grpc_health", "grpc_reflection"]


def server_platform_importable() -> str:
    """The error importing the platform's gRPC server raises ('' if it imports)."""
    try:
        importlib.import_module("headwater.platform.server")
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


async def produce_and_consume(boot: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    from headwater.client import AsyncAdminClient, AsyncConsumer, AsyncProducer, TopicPartition

    async with AsyncAdminClient(boot) as admin:
        await admin.create_topic(topic, 2, 1, {})
    async with AsyncProducer(boot, linger_ms=2, compression_type="zstd") as producer:
        futures = [
            await producer.send(topic, b"value-%d" % i, key=b"key-%d" % i) for i in range(count)
        ]
        await producer.flush()
        for future in futures:
            await future
    got: list[tuple[int, bytes]] = []
    async with AsyncConsumer(boot, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for record in await consumer.poll(timeout_ms=500, max_records=10_000):
                got.append((record.partition, record.value))
    return got


def main() -> int:
    boot, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    installed = [name for name in SERVER_ONLY if importlib.util.find_spec(name) is not None]
    got = asyncio.run(produce_and_consume(boot, topic, count))
    loaded = sorted(
        name
        for name in sys.modules
        if name.split(".")[0] in SERVER_ONLY
        or name.startswith(("headwater.platform", "headwater.dev", "services"))
    )
    report = {
        "server_packages_installed": installed,
        "server_modules_loaded_by_the_client": loaded,
        "platform_import_error": server_platform_importable(),
        "values": sorted(v.decode() for _, v in got),
        "headwater_file": importlib.import_module("headwater").__file__,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
