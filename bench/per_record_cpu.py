"""Where a per-record ``Producer.send()`` spends its time: the caller's CPU, the loop's, the wall.

    .venv/bin/python bench/per_record_cpu.py [--acks 1] [--record-size 100] [--partitions 1] \\
        [--records 1500000] [--rounds 2] [--bootstrap HOST:PORT] [--confluent-kafka]

Runs a loop of ``Producer.send(topic, value)`` (the blocking facade, no key, the sticky
partitioner; batch 1 MiB, linger 5 ms) against a one-broker
:class:`~headwater.dev.cluster.LocalCluster` it starts (or ``--bootstrap``), and reports per
record: the caller thread's CPU (``time.thread_time``), the producer's loop thread's CPU (from
``/proc/self/task/<tid>/stat``: encoding and the gRPC calls, which hold the GIL too), and the
wall time up to the last ``send`` and including the final ``flush``. Both threads share the
GIL, so the wall time per record is at least the sum of the two CPU figures.

``--confluent-kafka`` also times confluent-kafka's ``produce()`` call the same way, on a
producer whose broker is unreachable (its queue only: what the call itself costs the caller's
thread), with and without an ``on_delivery`` callback. Figures: docs/benchmarks.md, "Item 5's
run on a quiet machine".
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from headwater.client.admin import NewTopic
from headwater.client.sync import AdminClient, Producer
from headwater.dev.cluster import LocalCluster

TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu(native_id: int) -> float:
    """CPU seconds (user + system) of one thread of this process."""
    stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def headwater_round(bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, float]:
    pool = [os.urandom(args.record_size) for _ in range(16)]
    n = args.records
    with Producer(
        bootstrap,
        acks=args.acks,
        batch_size=1 << 20,
        linger_ms=5,
        buffer_memory=64 << 20,
        client_id="per-record-cpu",
    ) as p:
        p.send_many(topic, pool[:10]).result(60)  # metadata and connections
        p.flush()
        gc.freeze()
        loop_thread = next(t for t in threading.enumerate() if t.name == "headwater-producer")
        assert loop_thread.native_id is not None
        send = p.send
        loop0 = thread_cpu(loop_thread.native_id)
        t0, c0 = time.monotonic(), time.thread_time()
        for i in range(n):
            send(topic, pool[i & 15])
        c1, t1 = time.thread_time(), time.monotonic()
        loop1 = thread_cpu(loop_thread.native_id)
        p.flush()
        t2 = time.monotonic()
    us = 1e6 / n
    return {
        "caller_cpu_us": round((c1 - c0) * us, 3),
        "loop_cpu_us": round((loop1 - loop0) * us, 3),
        "wall_to_last_send_us": round((t1 - t0) * us, 3),
        "wall_with_flush_us": round((t2 - t0) * us, 3),
        "records_per_sec": round(n / (t2 - t0)),
    }


def confluent_kafka_call(args: argparse.Namespace) -> dict[str, float]:
    """confluent-kafka's produce() into its queue (no broker): the caller's CPU per call."""
    from confluent_kafka import Producer as CkProducer

    pool = [os.urandom(args.record_size) for _ in range(16)]
    n = min(args.records, 1_000_000)
    out: dict[str, float] = {}
    for label, kwargs in (("with_on_delivery", True), ("without_callback", False)):
        p = CkProducer(
            {
                "bootstrap.servers": "127.0.0.1:1",  # nothing listens: the queue only
                "linger.ms": 10,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 2 * n,
                "queue.buffering.max.kbytes": 2**21,
                "log_level": 0,
            }
        )
        produce = p.produce

        def on_delivery(err: object, msg: object) -> None:
            pass

        c0 = time.thread_time()
        if kwargs:
            for i in range(n):
                produce("t", pool[i & 15], on_delivery=on_delivery)
        else:
            for i in range(n):
                produce("t", pool[i & 15])
        out[f"ck_caller_cpu_us_{label}"] = round((time.thread_time() - c0) * 1e6 / n, 3)
        p.purge()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--acks", default="1")
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--records", type=int, default=1_500_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bootstrap", help="an existing cluster (default: start a LocalCluster)")
    ap.add_argument("--confluent-kafka", action="store_true")
    args = ap.parse_args()

    def run(bootstrap: str) -> None:
        topic = f"per-record-{os.getpid()}"
        with AdminClient(bootstrap) as admin:
            admin.create_topics([NewTopic(topic, args.partitions, 1)])
        for r in range(args.rounds):
            res = headwater_round(bootstrap, topic, args)
            line = {"round": r, "acks": args.acks, "record_size": args.record_size, **res}
            print(json.dumps({**line, "load": round(os.getloadavg()[0], 2)}), flush=True)
        if args.confluent_kafka:
            print(json.dumps(confluent_kafka_call(args)), flush=True)

    if args.bootstrap:
        run(args.bootstrap)
        return
    with (
        tempfile.TemporaryDirectory(prefix="hw-per-record-") as tmp,
        LocalCluster(Path(tmp) / "cluster", brokers=1) as cluster,
    ):
        run(cluster.bootstrap)


if __name__ == "__main__":
    main()
