"""Run Python code in a child interpreter where named C extension modules cannot be imported:
an install built without a C compiler (pyproject marks the extensions optional), so the
Python paths are taken."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterable

_PRELUDE = """
import sys

class _NoC:
    def find_spec(self, name, path=None, target=None):
        if name in {blocked!r}:
            raise ImportError("built without a C compiler")
        return None

sys.meta_path.insert(0, _NoC())
"""


def run_without_c(modules: Iterable[str], body: str, timeout: float = 60) -> str:
    """Run ``body`` with ``modules`` unimportable and return its stdout; AssertionError (with
    the child's stderr) if it exits non-zero."""
    code = _PRELUDE.format(blocked=set(modules)) + textwrap.dedent(body)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stderr
    return out.stdout
