"""Micro benchmark: Log.append of 1 MiB batches (1 KiB records) vs a raw page-cache write.

Both write the same bytes to a new file in the same directory, alternating, so the ratio
comes from one run on one machine (absolute figures on shared VMs are noisy). The raw case
is ``os.write`` of the batch bytes in a loop to a fresh file: the page-cache bandwidth the
storage engine's append path is measured against.

    python bench/storage_append.py [--dir DIR] [--mib 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from headwater.batch import encode_batch, validate_batches
from headwater.config import TopicConfig
from services.broker.storage.log import Log


def make_batch() -> bytes:
    values = [bytes([65 + i % 26]) * 1024 for i in range(1024)]
    return encode_batch(values, timestamps=1_700_000_000_000)


def raw_write(path: Path, batch: bytes, count: int) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(count):
            os.write(fd, batch)
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def log_append(directory: Path, batch: bytes, count: int) -> float:
    headers = validate_batches(batch, max_batch_bytes=len(batch))
    log = Log(directory, TopicConfig())
    try:
        t0 = time.perf_counter()
        for _ in range(count):
            log.append(batch, headers, 0)
        elapsed = time.perf_counter() - t0
        assert log.log_end_offset == count * 1024
        return elapsed
    finally:
        log.close(mark_clean=False)  # no fsync: not part of what is measured


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", default=None, help="where to write (default: system temp dir)")
    ap.add_argument("--mib", type=int, default=512, help="MiB written per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="unreported runs first (page faults)")
    args = ap.parse_args()

    batch = make_batch()
    count = max(1, args.mib * 1024 * 1024 // len(batch))
    mb = count * len(batch) / 1e6
    root = Path(tempfile.mkdtemp(prefix="hw-bench-", dir=args.dir))
    print(f"batch {len(batch)} B (1024 x 1 KiB records), {count} batches = {mb:.0f} MB per run")
    print(f"directory {root}")
    raw_rates, log_rates = [], []
    try:
        for r in range(-args.warmup, args.repeats):
            t_raw = raw_write(root / "raw.bin", batch, count)
            (root / "raw.bin").unlink()
            t_log = log_append(root / "t-0", batch, count)
            shutil.rmtree(root / "t-0")
            if r < 0:
                continue
            raw_rates.append(mb / t_raw)
            log_rates.append(mb / t_log)
            print(
                f"run {r + 1}: raw write {raw_rates[-1]:8.0f} MB/s   Log.append "
                f"{log_rates[-1]:8.0f} MB/s   ratio {log_rates[-1] / raw_rates[-1]:.2f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    raw_m, log_m = statistics.median(raw_rates), statistics.median(log_rates)
    print(
        f"median: raw write {raw_m:.0f} MB/s, Log.append {log_m:.0f} MB/s, "
        f"ratio {log_m / raw_m:.2f}"
    )


if __name__ == "__main__":
    main()
