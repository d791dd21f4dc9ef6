"""Paired A/B of two client source trees against one cluster, on a shared (loaded) machine.

    .venv/bin/python bench/client_ab.py --tree before=/path/to/old/checkout --tree after=. \\
        [--rounds 4] [--brokers 3] [--rf 3] [--acks all] [--record-size 1024] \\
        [--num-records 300000] [--max-seconds 20] [--partitions 1] [--mode many] \\
        [--consume records|values] [--out rows.jsonl]

Starts one :class:`~headwater.dev.cluster.LocalCluster` from *this* tree (so the brokers are
the same for every run), then runs ``headwater bench produce --mode many`` (the row
``produce-max`` of bench/side_by_side.py; ``--mode sync`` or ``produce`` for its per-record
rows) with each tree's client in turn, ``--rounds`` times, alternating A, B, A, B... so that a
change in the machine's load hits both alike. Each run writes a fresh topic (``--partitions``,
``--rf`` replicas, ``min.insync.replicas`` as the broker default). ``--consume D`` measures
the consumer instead: this tree's client writes one topic first (``--num-records``, ``--mode
many``, acks=1), then every run reads it from the start with ``headwater bench consume
--decode D`` (``records``: the blocking ``Consumer.poll()`` iterated per record, the
per-record consumer row of bench/side_by_side.py; ``values``: the asyncio consumer's
batches). Prints one line per run (with the client process's CPU seconds,
``client_cpu_s``) and the median per tree; stops the cluster by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from headwater.dev.cluster import LocalCluster  # noqa: E402


def _produce_args(topic: str, args: argparse.Namespace) -> list[str]:
    return [
        "produce",
        "--topic",
        topic,
        "--num-records",
        str(args.num_records),
        "--record-size",
        str(args.record_size),
        "--acks",
        args.acks,
        "--partitions",
        str(args.partitions),
        "--replication-factor",
        str(args.rf),
        "--mode",
        args.mode,
        "--max-seconds",
        str(args.max_seconds),
        "--warmup-records",
        str(args.num_records // 10),
    ]


def _consume_args(topic: str, args: argparse.Namespace) -> list[str]:
    return [
        "consume",
        "--topic",
        topic,
        "--num-records",
        str(args.num_records),
        "--decode",
        args.consume,
        "--max-seconds",
        str(args.max_seconds),
    ]


def run_once(tree: Path, bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, float]:
    """One ``headwater bench`` run with ``tree``'s client: the produce row, or with
    ``--consume`` a read of ``topic`` from its start."""
    env = {**os.environ, "HEADWATER_BOOTSTRAP": bootstrap, "PYTHONPATH": str(tree)}
    bench = _consume_args(topic, args) if args.consume else _produce_args(topic, args)
    cmd = [sys.executable, "-m", "headwater.cli.main", "--output", "json", "bench", *bench]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=args.max_seconds + 300, cwd=tree
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    res: dict[str, float] = json.loads(proc.stdout[proc.stdout.index("{") :])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    res["client_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", required=True, help="name=path (twice)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--acks", default="all")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--num-records", type=int, default=300_000)
    ap.add_argument("--max-seconds", type=float, default=20)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument(
        "--mode",
        default="many",
        choices=("many", "sync", "produce", "send"),
        help="the `headwater bench produce --mode` (many: send_many; sync: blocking "
        "Producer.send per record; produce: AsyncProducer.produce per record)",
    )
    ap.add_argument(
        "--consume",
        choices=("records", "values"),
        help="measure the consumer instead: `headwater bench consume --decode` of one topic "
        "this tree's client writes first",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree)]
    results: dict[str, list[float]] = {name: [] for name, _ in trees}
    with (
        tempfile.TemporaryDirectory(prefix="hw-ab-") as tmp,
        LocalCluster(Path(tmp) / "cluster", brokers=args.brokers) as cluster,
    ):
        if args.consume:
            source = argparse.Namespace(
                **{**vars(args), "consume": None, "acks": "1", "mode": "many"}
            )
            written = run_once(HERE.parent, cluster.bootstrap, "ab-source", source)
            print(json.dumps({"source": "ab-source", **written}), flush=True)
        for r in range(args.rounds):
            for name, tree in trees if r % 2 == 0 else trees[::-1]:
                topic = "ab-source" if args.consume else f"ab-{r}-{name}"
                res = run_once(tree, cluster.bootstrap, topic, args)
                results[name].append(float(res["records_per_sec"]))
                line = {"round": r, "tree": name, **res, "load": os.getloadavg()[0]}
                print(json.dumps(line), flush=True)
                if args.out is not None:
                    with args.out.open("a") as f:
                        f.write(json.dumps(line) + "\n")
    for name, rates in results.items():
        print(
            f"{name}: median {statistics.median(rates):,.0f} records/s over {len(rates)} runs "
            f"({', '.join(f'{x:,.0f}' for x in rates)})"
        )


if __name__ == "__main__":
    main()
