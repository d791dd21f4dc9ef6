"""The replication answer's CPU per round: generated protobuf vs the hand-written wire path.

For answers of 1, 2 and 8 MiB of records: the leader's side (build the partition's answer,
the session's one check of ``records``, serialise) and the follower's side (parse, two reads
of ``records``), each with the generated ``broker_pb2`` classes and with
:mod:`services.broker.replication.fetch_wire`; median of 30 calls, ms. Checks first that both
leader paths produce the same bytes. Figures: docs/benchmarks.md, "Session 30: what binds the
row at one partition".

Usage::

    .venv/bin/python bench/replica_fetch_wire.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from headwater.v1 import broker_pb2
from services.broker.replication.fetch_wire import (
    PartitionDataView,
    ReplicaFetchView,
    decode_replica_fetch_response,
    encode_replica_fetch_response,
)


def med(f: Callable[[], object]) -> float:
    """Median wall ms of 30 calls of ``f``."""
    ts = []
    for _ in range(30):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ts)


def leader_generated(rec: bytes) -> bytes:
    d = broker_pb2.ReplicaFetchPartitionData(
        topic="t", partition=0, records=rec, high_watermark=5, log_start_offset=0
    )
    bool(d.records)  # the session's check (FetchSession.answer)
    return broker_pb2.ReplicaFetchResponse(partitions=[d], incremental=True).SerializeToString()


def leader_by_hand(rec: bytes) -> bytes:
    d = PartitionDataView("t", 0, records=rec, high_watermark=5, log_start_offset=0)
    bool(d.records)
    return encode_replica_fetch_response(ReplicaFetchView([d], incremental=True))


def follower_generated(wire: bytes) -> int:
    d = broker_pb2.ReplicaFetchResponse.FromString(wire).partitions[0]
    return len(d.records) + len(d.records)  # the fetcher's two reads


def follower_by_hand(wire: bytes) -> int:
    d = decode_replica_fetch_response(wire).partitions[0]
    return len(d.records) + len(d.records)


def main() -> None:
    for mb in (1, 2, 8):
        rec = os.urandom(mb << 20)
        wire = leader_generated(rec)
        assert wire == leader_by_hand(rec), "the two leader paths must write the same bytes"
        row = {
            "records_mib": mb,
            "leader_generated_ms": med(lambda r=rec: leader_generated(r)),
            "leader_by_hand_ms": med(lambda r=rec: leader_by_hand(r)),
            "follower_generated_ms": med(lambda w=wire: follower_generated(w)),
            "follower_by_hand_ms": med(lambda w=wire: follower_by_hand(w)),
        }
        print(json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()
