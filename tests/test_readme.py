"""The README's Python quickstart runs as written against a real local cluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _block(lang: str, containing: str) -> str:
    blocks = re.findall(rf"```{lang}\n(.*?)```", README, re.DOTALL)
    [block] = [b for b in blocks if containing in b]
    return str(block)


def _dry_run(*target: str) -> list[str]:
    """The commands ``make TARGET`` would run (recursive makes included), without running them."""
    proc = subprocess.run(
        ["make", "--no-print-directory", "-n", *target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def test_readme_gives_two_setup_commands_and_ci_runs_the_test_one(tmp_path: Path) -> None:
    setup = _block("sh", "make test")
    commands = [line.split("#")[0].strip() for line in setup.splitlines()]
    assert [c for c in commands if c] == ["make dev", "make test"]
    # .ci/run, run with a `make` that only records its arguments, asks for `make ci` ...
    fake = tmp_path / "make"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls"}\n')
    fake.chmod(0o755)
    subprocess.run(
        ["bash", str(ROOT / ".ci" / "run")],
        env=dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}"),
        check=True,
        timeout=60,
    )
    assert (tmp_path / "calls").read_text().split() == ["ci"]
    # ... and `make ci` runs everything `make test` runs (and lint)
    ci, test = _dry_run("ci"), _dry_run("test")
    tests_run = [c for c in test if "pytest" in c]
    assert tests_run and all(c in ci for c in tests_run), (tests_run, ci)
    assert any("ruff check" in c for c in ci)


def test_python_quickstart_runs(cluster: Any, tmp_path: Path) -> None:
    code = _block("python", "from headwater.client import")
    line = 'BOOTSTRAP = "127.0.0.1:9092"'
    assert line in code
    script = tmp_path / "quickstart.py"
    script.write_text(code.replace(line, f"BOOTSTRAP = {cluster.bootstrap!r}"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    first_meta, first_record = proc.stdout.strip().splitlines()
    assert first_meta.startswith("RecordMetadata(") and "topic='greetings'" in first_meta
    assert first_record.startswith("ConsumerRecord(") and "value=b'hello " in first_record
