"""The longer fuzz campaign: ``python -m tests.fuzz.run --seconds 1800`` (``make fuzz-long``).

Starts the dedicated fuzz cluster in a temporary folder (or ``--data-dir``), fuzzes every RPC
of every service for the given total time, prints the per-RPC summary and every bad answer,
stops the cluster, and exits 1 when anything bad was found. Logs stay in the data folder
(``logs/``) when ``--data-dir`` is given.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.fuzz import campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="total fuzzing time")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the cluster here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="headwater-fuzz-") as tmp:
        data_dir = args.data_dir or Path(tmp)
        cluster = campaign.start_cluster(data_dir)
        try:
            tally = campaign.run_campaign(cluster, args.seconds, verbose=True)
        finally:
            cluster.stop()
    print(campaign.report(tally))
    return 1 if tally.bad else 0


if __name__ == "__main__":
    sys.exit(main())
