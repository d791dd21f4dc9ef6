"""The longer hostile run: ``python -m tests.fuzz.run --seconds 1800`` (``make fuzz-long``).

Starts the capped fuzz cluster (:func:`tests.fuzz.suite.start`: every service under a memory
cap, acknowledged guard records) in a temporary folder (or ``--data-dir``), sends every RPC
every deterministic hostile case at the long scale (:data:`tests.fuzz.cases.LONG`: repeated
fields inflated to up to 10^7 entries and 60 MiB, 4 MiB strings, more random lengths), then
runs the hypothesis campaign over every RPC for the rest of ``--seconds`` (the deterministic
cases always run in full, however short ``--seconds`` is), and ends with the suite's checks:
no process killed by or reaching the cap, no acknowledged record lost, a fresh produce and
fetch, no traceback in any log. Prints every bad answer and death as found, the per-RPC
summary, and exits 1 when anything bad was found. Logs stay in ``DIR/logs`` with
``--data-dir``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tests.fuzz import campaign, cases, rpcs, suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="total fuzzing time")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the cluster here")
    parser.add_argument(
        "--scale", choices=("ci", "long"), default="long", help="size of the hostile cases"
    )
    args = parser.parse_args(argv)
    scale = cases.LONG if args.scale == "long" else cases.CI
    started = time.monotonic()
    bad: list[str] = []
    with tempfile.TemporaryDirectory(prefix="headwater-fuzz-") as tmp:
        run = suite.start(args.data_dir or Path(tmp), scale)
        run.log = lambda line: print(line, file=sys.stderr, flush=True)
        try:
            for rpc in rpcs.all_rpcs():
                bad += run.run_rpc(rpc)
                print(f"{rpc.name}: hostile cases done", file=sys.stderr, flush=True)
            left = args.seconds - (time.monotonic() - started)
            if left > 0:
                tally = campaign.run_campaign(run.cluster, left, verbose=True)
                print(campaign.report(tally))
                bad += tally.bad
            bad += run.final_problems()
            print(run.summary())
        finally:
            suite.stop(run)
    bad = list(dict.fromkeys(bad))  # a log alarm is found by the campaign and the end check
    print(f"{len(bad)} problems in {time.monotonic() - started:.0f}s")
    for line in bad:
        print("BAD: " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
