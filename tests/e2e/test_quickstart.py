"""The README quickstart, end to end, with real processes.

`headwater dev` starts etcd, a controller and a broker; the CLI creates a topic, produces
100,000 lines from stdin and consumes them back. Every line must come back exactly once, and
within each partition in the order produced. Finally SIGTERM stops the whole tree.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

N = 100_000


def _cli(*args: str, bootstrap: str, stdin: bytes | None = None, timeout: float = 120) -> bytes:
    env = {**os.environ, "HEADWATER_BOOTSTRAP": bootstrap}
    proc = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, (args, proc.stderr.decode(errors="replace")[-2000:])
    return proc.stdout


def _read_bootstrap(proc: subprocess.Popen[bytes], deadline_s: float) -> str:
    """Read the dev command's stdout until the `bootstrap: HOST:PORT` line (bounded)."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen = b""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            continue
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
        for line in seen.decode(errors="replace").splitlines():
            if line.startswith("bootstrap: "):
                return line.split(": ", 1)[1].strip()
    raise AssertionError(f"no bootstrap line within {deadline_s}s; output: {seen[-2000:]!r}")


@pytest.fixture
def dev_cluster(tmp_path: Path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwater.cli.main", "dev", "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc, _read_bootstrap(proc, 60), tmp_path / "data"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_quickstart_roundtrip_and_clean_stop(dev_cluster) -> None:
    proc, bootstrap, data_dir = dev_cluster

    _cli("topics", "create", "demo", "--partitions", "3", bootstrap=bootstrap)
    (described,) = json.loads(
        _cli("topics", "describe", "demo", "--output", "json", bootstrap=bootstrap)
    )
    assert len(described["partitions"]) == 3

    lines = "".join(f"{i}\n" for i in range(1, N + 1)).encode()
    _cli("produce", "demo", bootstrap=bootstrap, stdin=lines)

    out = _cli(
        "consume",
        "demo",
        "--from-beginning",
        "--max-messages",
        str(N),
        "--output",
        "json",
        bootstrap=bootstrap,
    )
    records = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    assert len(records) == N
    values = sorted(int(r["value"]) for r in records)
    assert values == list(range(1, N + 1)), "every line exactly once"

    per_partition: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in records:
        per_partition[r["partition"]].append((r["offset"], int(r["value"])))
    assert set(per_partition) <= {0, 1, 2}
    for partition, rows in per_partition.items():
        offsets = [o for o, _ in rows]
        assert offsets == sorted(offsets), f"partition {partition} offsets out of order"
        in_partition = [v for _, v in rows]
        assert in_partition == sorted(in_partition), f"partition {partition} lines out of order"

    # The CLI's plain output prints just the values, one per line. Null keys are placed
    # sticky (a partition per batch), so read a partition that did receive records.
    busiest = max(per_partition, key=lambda p: len(per_partition[p]))
    text = _cli(
        "consume",
        "demo",
        "--partition",
        str(busiest),
        "--offset",
        "0",
        "--max-messages",
        "10",
        bootstrap=bootstrap,
    )
    assert text.decode().splitlines() == [str(v) for _, v in per_partition[busiest][:10]]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert (data_dir / "logs").is_dir()
