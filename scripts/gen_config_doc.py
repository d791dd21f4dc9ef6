#!/usr/bin/env python3
"""Generate the reference parts of docs/configuration.md.

Usage::

    python scripts/gen_config_doc.py            # print the generated sections
    python scripts/gen_config_doc.py --write    # replace them in docs/configuration.md

Two generated sections, each between ``<!-- BEGIN GENERATED: NAME -->`` and
``<!-- END GENERATED: NAME -->`` markers:

* ``topic-configs``: one row per key of :data:`headwater.config.TOPIC_KEYS` (key, type,
  default, valid values, meaning);
* ``service-flags``: the ``--help`` of every service entry point in :data:`SERVICES` that
  exists in this checkout, run with a fixed terminal width so the text is reproducible.

``tests/test_config_doc.py`` fails when the doc differs from this script's output.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from headwater.config import TOPIC_KEYS  # noqa: E402

DOC = ROOT / "docs" / "configuration.md"

#: (title, module run with ``python -m``, extra arguments before ``--help``, command shown)
#: of every process whose flags are documented; a module not in this checkout is skipped.
SERVICES = [
    ("Local cluster", "headwater.cli.main", ["dev"], "headwater dev"),
    ("Broker", "services.broker", [], "python -m services.broker"),
    ("Controller", "services.controller", [], "python -m services.controller"),
    ("Coordinator", "services.coordinator", [], "python -m services.coordinator"),
]


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- BEGIN GENERATED: {name} -->", f"<!-- END GENERATED: {name} -->"


def _default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def topic_configs() -> str:
    rows = [
        "| key | type | default | valid values | meaning |",
        "|---|---|---|---|---|",
    ]
    for name in sorted(TOPIC_KEYS):
        key = TOPIC_KEYS[name]
        rows.append(
            f"| `{name}` | {key.kind.__name__} | `{_default(key.default)}` | "
            f"{_cell(key.check_doc or 'any')} | {_cell(key.doc)} |"
        )
    return "\n".join(rows) + "\n"


def _has_main(module: str) -> bool:
    """Whether ``python -m module`` exists in this checkout (a service not built yet has none)."""
    path = ROOT / Path(*module.split("."))
    return (path / "__main__.py").is_file() or path.with_suffix(".py").is_file()


def service_flags() -> str:
    env = dict(os.environ, COLUMNS="100", PYTHONPATH=str(ROOT))
    parts: list[str] = []
    for title, module, extra, shown in SERVICES:
        if not _has_main(module):
            continue
        out = subprocess.run(
            [sys.executable, "-m", module, *extra, "--help"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
            check=True,
        ).stdout
        parts += [f"### {title}: `{shown}`", "", "```text", out.rstrip(), "```", ""]
    return "\n".join(parts)


def render() -> dict[str, str]:
    return {"topic-configs": topic_configs(), "service-flags": service_flags()}


def replace_sections(doc: str, sections: dict[str, str]) -> str:
    for name, body in sections.items():
        begin, end = _markers(name)
        head, rest = doc.split(begin, 1)
        _, tail = rest.split(end, 1)
        doc = f"{head}{begin}\n{body}{end}{tail}"
    return doc


def extract_sections(doc: str) -> dict[str, str]:
    out = {}
    for name in render_names():
        begin, end = _markers(name)
        start = doc.index(begin) + len(begin) + 1
        out[name] = doc[start : doc.index(end)]
    return out


def render_names() -> list[str]:
    return ["topic-configs", "service-flags"]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="update docs/configuration.md")
    args = parser.parse_args()
    sections = render()
    if args.write:
        DOC.write_text(replace_sections(DOC.read_text(), sections))
    else:
        for name, body in sections.items():
            sys.stdout.write(f"--- {name}\n{body}")


if __name__ == "__main__":
    main()
