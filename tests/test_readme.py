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


def test_readme_names_the_two_setup_commands() -> None:
    setup = _block("sh", "make test")
    assert re.search(r"^make dev\b", setup, re.M) and re.search(r"^make test\b", setup, re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make ci" in ci
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^ci: install\n\t\$\(MAKE\) lint\n\t\$\(MAKE\) test$", makefile, re.M)


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
