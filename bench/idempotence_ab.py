"""Paired A/B of producer settings against one cluster: what idempotence costs a bulk row.

    .venv/bin/python bench/idempotence_ab.py [--variants all/on,all/off,1/off] [--rounds 4] \\
        [--brokers 1] [--partitions 1] [--record-size 1024] [--num-records 1000000] \\
        [--batch-size N] [--out rows.jsonl] [--tree before=/old/checkout --tree after=.]

Starts one :class:`~headwater.dev.cluster.LocalCluster` of this tree and runs ``headwater
bench produce --mode many`` (the ``send_many`` row of bench/side_by_side.py) once per variant
per round, the variants' order reversed every other round so the machine's drift hits each
alike. A variant is ``ACKS/IDEMPOTENCE``: ``all/on`` is the default producer with acks=all,
``all/off`` the same acks without idempotence. Each run writes a fresh topic (replication
factor = ``--brokers``) after the page-cache warm of every side-by-side produce row
(bench/peers/common.py ``warm_page_cache``) and deletes it afterwards. Per run it prints the
records/s, the client's and the brokers' CPU seconds, and the brokers' reorder waits
(``headwater_broker_produce_reorder_waits_total``: produces that waited for an earlier batch
of their producer); then the median per variant. Stops the cluster by PID.

With ``--tree NAME=PATH`` (twice or more) it compares brokers instead: each round runs every
variant once per tree, the trees' order reversed every other round, each run being that tree's
own ``bench/idempotence_ab.py --rounds 1`` (its own cluster, brokers and client); lines and
medians are then per tree and variant.
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
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.peers.common import warm_page_cache  # noqa: E402
from headwater.dev.cluster import LocalCluster  # noqa: E402

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def reorder_waits(metrics_urls: list[str], topic: str) -> int:
    """The brokers' reorder waits for ``topic`` (0 when none was counted)."""
    total = 0.0
    prefix = f'headwater_broker_produce_reorder_waits_total{{topic="{topic}"}} '
    for url in metrics_urls:
        with urllib.request.urlopen(url, timeout=10) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(prefix):
                    total += float(line[len(prefix) :])
    return int(total)


def headwater(bootstrap: str, *args: str, timeout: float = 600) -> str:
    """``headwater --bootstrap B ARGS`` of this tree; its stdout (RuntimeError on failure)."""
    cmd = [sys.executable, "-m", "headwater.cli.main", "--bootstrap", bootstrap, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=HERE.parent)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args[:3])} failed ({proc.returncode}): {proc.stderr[-2000:]}"
        )
    return proc.stdout


def run_once(
    cluster: LocalCluster, topic: str, acks: str, idempotence: str, args: argparse.Namespace
) -> dict[str, float]:
    rf = str(args.brokers)
    headwater(cluster.bootstrap, "topics", "create", topic, "--partitions",
              str(args.partitions), "--replication-factor", rf)  # fmt: skip
    warm_page_cache()
    pids = [p.pid for p in cluster.brokers.values()]
    brokers_before = sum(cpu_seconds(pid) for pid in pids)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = headwater(
        cluster.bootstrap, "--output", "json", "bench", "produce", "--topic", topic,
        "--num-records", str(args.num_records), "--record-size", str(args.record_size),
        "--acks", acks, "--idempotence", "on" if idempotence == "on" else "off",
        "--mode", "many", "--max-seconds", "20", "--warmup-records",
        str(args.num_records // 10), "--batch-size", str(args.batch_size),
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    res: dict[str, float] = json.loads(out[out.index("{") :])
    res["client_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    res["brokers_cpu_s"] = sum(cpu_seconds(pid) for pid in pids) - brokers_before
    res["reorder_waits"] = reorder_waits(list(cluster.metrics_urls().values()), topic)
    headwater(cluster.bootstrap, "topics", "delete", topic)
    return res


def compare_trees(args: argparse.Namespace, variants: list[str]) -> None:
    """``--tree`` mode (module doc): paired rounds over the trees, one cluster per run."""
    trees = [(n, Path(p).resolve()) for n, p in (t.split("=", 1) for t in args.tree)]
    rates: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for name, tree in trees if r % 2 == 0 else trees[::-1]:
            for v in variants:
                cmd = [
                    sys.executable, str(tree / "bench" / "idempotence_ab.py"), "--variants", v,
                    "--rounds", "1", "--brokers", str(args.brokers), "--partitions",
                    str(args.partitions), "--record-size", str(args.record_size),
                    "--num-records", str(args.num_records), "--batch-size", str(args.batch_size),
                ]  # fmt: skip
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, timeout=900)
                runs = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"round"')]
                if proc.returncode != 0 or len(runs) != 1:
                    raise RuntimeError(f"{name} {v} failed: {proc.stderr[-2000:]}")
                line = {**json.loads(runs[0]), "round": r, "tree": name}
                rates.setdefault((name, v), []).append(float(line["records_per_sec"]))
                print(json.dumps(line), flush=True)
                if args.out is not None:
                    with args.out.open("a") as f:
                        f.write(json.dumps(line) + "\n")
    for (name, v), xs in rates.items():
        print(
            f"{name} {v}: median {statistics.median(xs):,.0f} records/s over {len(xs)} runs "
            f"({', '.join(f'{x:,.0f}' for x in xs)})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="all/on,all/off,1/off")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--num-records", type=int, default=1_000_000)
    ap.add_argument("--batch-size", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH: compare brokers")
    args = ap.parse_args()
    variants = args.variants.split(",")
    for v in variants:
        acks, _, idem = v.partition("/")
        if (
            acks not in ("1", "all")
            or idem not in ("on", "off")
            or (idem == "on" and acks != "all")
        ):
            ap.error(f"variant {v!r}: ACKS/IDEMPOTENCE with ACKS 1 or all, on only with all")
    if args.tree:
        compare_trees(args, variants)
        return
    rates: dict[str, list[float]] = {v: [] for v in variants}
    with (
        tempfile.TemporaryDirectory(prefix="hw-idem-ab-") as tmp,
        LocalCluster(Path(tmp) / "cluster", brokers=args.brokers) as cluster,
    ):
        for r in range(args.rounds):
            for v in variants if r % 2 == 0 else variants[::-1]:
                acks, _, idem = v.partition("/")
                res = run_once(cluster, f"ab-{r}-{acks}-{idem}", acks, idem, args)
                rates[v].append(float(res["records_per_sec"]))
                line = {"round": r, "variant": v, **res, "load": os.getloadavg()[0]}
                print(json.dumps(line), flush=True)
                if args.out is not None:
                    with args.out.open("a") as f:
                        f.write(json.dumps(line) + "\n")
    for v, xs in rates.items():
        print(
            f"{v}: median {statistics.median(xs):,.0f} records/s over {len(xs)} runs "
            f"({', '.join(f'{x:,.0f}' for x in xs)})"
        )


if __name__ == "__main__":
    main()
