"""Running the ``headwater`` CLI as a user does: a subprocess of this interpreter, pointed at a
cluster through HEADWATER_BOOTSTRAP (shared by the CLI suites)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any


def hw(
    cluster: Any | None, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``headwater ARGS`` against ``cluster`` (none: HEADWATER_BOOTSTRAP unset), not checked."""
    e = dict(os.environ)
    e.pop("HEADWATER_BOOTSTRAP", None)
    if cluster is not None:
        e["HEADWATER_BOOTSTRAP"] = cluster.bootstrap
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", *args],
        input=stdin,
        capture_output=True,
        env=e,
        timeout=120,
        check=False,
    )


def ok(proc: subprocess.CompletedProcess[bytes]) -> str:
    """The output of a run that must have succeeded (its stderr is the failure's message)."""
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()
