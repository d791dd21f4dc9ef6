"""One test run at a time on the machine's Kubernetes test node.

The node of scripts/k8s/node.sh is a machine-wide thing: one network namespace, one directory
(``/var/lib/headwater-k8s-node``), one release ``hw``. Two runs of ``pytest tests/images
tests/k8s_node`` on one machine (two CI runs of two clones, say) would share it: one run's
``helm upgrade`` meets the other's ("another operation (install/upgrade/rollback) is in
progress"), one run's node teardown kills the other's pods. node.sh's own lock covers one
``up`` or ``down``, not a whole run, so a run holds this lock from its configuration to its
exit: a second run waits for the first to finish, with a bound, and says that it waits.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path
from typing import IO

#: how long a second run waits for the first (the node's tests take ~11 minutes on 2 cores);
#: HEADWATER_K8S_NODE_LOCK_WAIT_S sets another bound
WAIT_S = float(os.environ.get("HEADWATER_K8S_NODE_LOCK_WAIT_S", 45 * 60))
_POLL_S = 1.0


def lock_path() -> Path:
    """The lock's file for the node of node.sh (its HEADWATER_K8S_NODE_DIR)."""
    return lock_path_for(os.environ.get("HEADWATER_K8S_NODE_DIR", "/var/lib/headwater-k8s-node"))


def lock_path_for(node_dir: str) -> Path:
    """The lock's file of the node kept in ``node_dir``: beside it, so it outlives the node."""
    return Path(f"{node_dir.rstrip('/')}.tests.lock")


def hold(path: Path, *, wait_s: float = WAIT_S, poll_s: float = _POLL_S) -> IO[str]:
    """Take the exclusive lock on ``path`` and return its open file, which holds it until it is
    closed or the process exits. Waits at most ``wait_s`` for another holder, saying so once on
    stderr; TimeoutError naming the holder's PID after that."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")  # noqa: SIM115 (held open for the process's lifetime)
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = _holder(f)
                f.close()
                raise TimeoutError(
                    f"{path} is still held after {wait_s:.0f} s (by PID {holder}): another "
                    "run uses the machine's Kubernetes test node"
                ) from None
            if not said:
                print(
                    f"waiting (at most {wait_s:.0f} s) for PID {_holder(f)}'s run on the "
                    f"Kubernetes test node to finish ({path})",
                    file=sys.stderr,
                    flush=True,
                )
                said = True
            time.sleep(poll_s)
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def _holder(f: IO[str]) -> str:
    f.seek(0)
    return f.read().strip() or "unknown"
