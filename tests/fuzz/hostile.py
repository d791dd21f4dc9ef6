"""Helpers for the bad-input table (tests/security/test_bad_input_table.py): hostile batches,
raw bytes to a gRPC port, process memory, and a cluster view (leaders, end offsets, health).
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import crc32c
import grpc

from headwater.batch import encode_batch
from headwater.batch.layout import CRC_START
from headwater.client.grpc_options import channel_options
from headwater.dev.cluster import LocalCluster
from headwater.errors import from_rpc_error
from headwater.v1 import broker_pb2, broker_pb2_grpc, metadata_pb2
from tests.fuzz import rpcs

GOOD = encode_batch([b"hello", b"world"], [b"k", None])


def patched(buf: bytes, fmt: str, at: int, value: object, *, fix_crc: bool) -> bytes:
    """``buf`` with one header field overwritten; the CRC recomputed when ``fix_crc`` (so the
    check behind the CRC is what refuses it)."""
    b = bytearray(buf)
    struct.pack_into(fmt, b, at, value)
    if fix_crc:
        struct.pack_into("<I", b, 20, crc32c.crc32c(bytes(b[CRC_START:])))
    return bytes(b)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc/<pid>/status (VmRSS, kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def send_raw(address: str, payload: bytes, timeout: float = 5.0) -> bytes:
    """Open a TCP connection, send ``payload``, read what comes back until the server closes
    the connection or ``timeout`` passes."""
    host, port = address.rsplit(":", 1)
    got = b""
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(payload)
        try:
            while len(got) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except TimeoutError:
            pass
    return got


def code_of_call(fn: object) -> int:
    """Run ``fn()`` and return 0 if it answered, else the wire code of its gRPC status."""
    try:
        fn()  # type: ignore[operator]
    except grpc.RpcError as err:
        return from_rpc_error(err).code
    return 0


class ClusterView:
    """Addresses, leaders, end offsets and health of a running LocalCluster."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._channels: dict[str, grpc.Channel] = {}

    def channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            self._channels[address] = grpc.insecure_channel(address, options=channel_options())
        return self._channels[address]

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()

    def broker_stub(self, broker_id: int) -> broker_pb2_grpc.BrokerStub:
        return broker_pb2_grpc.BrokerStub(self.channel(self.cluster.brokers[broker_id].address))

    def partitions(self, topic: str) -> dict[int, metadata_pb2.PartitionState]:
        resp = self.broker_stub(1).Metadata(metadata_pb2.MetadataRequest(), timeout=10)
        for t in resp.topics:
            if t.name == topic:
                return {p.partition: p for p in t.partitions}
        return {}

    def leader(self, topic: str, partition: int) -> int:
        return self.partitions(topic)[partition].leader

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Log end offset of every partition of ``topic``, asked of its leader."""
        ends = {}
        for p, state in self.partitions(topic).items():
            resp = self.broker_stub(state.leader).ListOffsets(
                broker_pb2.ListOffsetsRequest(
                    partitions=[
                        broker_pb2.ListOffsetsPartition(topic=topic, partition=p, timestamp=-1)
                    ]
                ),
                timeout=10,
            )
            ends[p] = resp.partitions[0].offset
        return ends

    def topics(self) -> set[str]:
        resp = self.broker_stub(1).Metadata(metadata_pb2.MetadataRequest(), timeout=10)
        return {t.name for t in resp.topics}

    def unhealthy(self) -> list[str]:
        procs = [*self.cluster.controllers.values(), *self.cluster.brokers.values()]
        procs += list(self.cluster.coordinators.values())
        return [p.name for p in procs if not (p.alive() and rpcs.healthy(p.address))]
