"""What a log writer gets from the page cache on this VM kind, with and without a bounded window.

Writes ``--gib`` GiB in 1 MiB ``os.write`` calls into one new file and prints MB/s per GiB,
twice per mode, the modes alternated in one run:

* ``plain`` — what a broker's log does today: every append needs new page-cache pages;
* ``window`` — every 16 MiB the writer starts writeback of what it just wrote
  (``sync_file_range(SYNC_FILE_RANGE_WRITE)``) and, for data more than ``--window-mib`` behind
  the end, waits for that writeback and drops those pages from the cache
  (``posix_fadvise(DONTNEED)``), so the pages it frees are the pages its next writes take.

On a VM that hands freed guest memory back to its host (free page reporting), a page touched
for the first time since costs a host fault: ``plain`` falls to ~0.4 GB/s after the first GiB
or two while ``window`` keeps ~3 GB/s (docs/benchmarks.md "The VM's memory under the 1 KiB
rows"). Linux only (``sync_file_range`` through ctypes; Python has no binding).

    python bench/fresh_pages.py [--dir DIR] [--gib 6] [--window-mib 256] [--rounds 2]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import tempfile
import time
from pathlib import Path

MIB = 1 << 20
STEP = 16 * MIB
#: sync_file_range(2) flags
WAIT_BEFORE, WRITE, WAIT_AFTER = 1, 2, 4


def _sync_file_range() -> ctypes._NamedFuncPointer:
    fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def write_pass(path: Path, gib: int, window: int | None) -> list[float]:
    """MB/s of each GiB of one pass (``window`` None: plain)."""
    sfr = _sync_file_range()
    buf = os.urandom(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    rates: list[float] = []
    try:
        off = dropped = 0
        t = time.perf_counter()
        for i in range(gib * 1024):
            os.write(fd, buf)
            off += MIB
            if window is not None and off % STEP == 0:
                sfr(fd, off - STEP, STEP, WRITE)
                if off - dropped > window + 4 * STEP:
                    end = off - window
                    sfr(fd, dropped, end - dropped, WAIT_BEFORE | WRITE | WAIT_AFTER)
                    os.posix_fadvise(fd, dropped, end - dropped, os.POSIX_FADV_DONTNEED)
                    dropped = end
            if (i + 1) % 1024 == 0:
                now = time.perf_counter()
                rates.append(round(1024 * MIB / 1e6 / (now - t)))
                t = now
    finally:
        os.close(fd)
        path.unlink()
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--gib", type=int, default=6)
    ap.add_argument("--window-mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="hw-fresh-") as tmp:
        for r in range(args.rounds):
            for mode in ("plain", "window"):
                window = args.window_mib * MIB if mode == "window" else None
                rates = write_pass(Path(tmp) / "log.bin", args.gib, window)
                print(json.dumps({"round": r, "mode": mode, "mb_s_per_gib": rates}), flush=True)


if __name__ == "__main__":
    main()
