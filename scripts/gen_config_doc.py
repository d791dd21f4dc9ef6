#!/usr/bin/env python3
"""Generate the reference parts of docs/configuration.md.

Usage::

    python scripts/gen_config_doc.py            # print the generated sections
    python scripts/gen_config_doc.py --write    # replace them in docs/configuration.md

Two generated sections, each between ``<!-- BEGIN GENERATED: NAME -->`` and
``<!-- END GENERATED: NAME -->`` markers:

* ``topic-configs``: one row per key of :data:`headwater.config.TOPIC_KEYS` (key, type,
  default, valid values, meaning);
* ``broker-configs``: the broker keys other than the topic keys
  (:data:`headwater.config.BROKER_KEYS`: quota window, read-only start-up flags), with
  whether each is dynamic;
* ``quota-configs``: the quota keys of client and user entities
  (:data:`headwater.config.QUOTA_KEYS`);
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

from headwater.config import (  # noqa: E402
    BROKER_KEYS,
    QUOTA_KEYS,
    TOPIC_KEYS,
    ConfigKey,
)

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


def _table(keys: dict[str, ConfigKey], *, dynamic_column: bool = False) -> str:
    head = "| key | type | default | valid values |" + (" dynamic |" if dynamic_column else "")
    rows = [head + " meaning |", "|---|---|---|---|" + ("---|" if dynamic_column else "") + "---|"]
    for name in sorted(keys):
        key = keys[name]
        default = "none" if key.default is None else f"`{_default(key.default)}`"
        dyn = (" read-only |" if key.read_only else " yes |") if dynamic_column else ""
        rows.append(
            f"| `{name}` | {key.kind.__name__} | {default} | "
            f"{_cell(key.check_doc or 'any')} |{dyn} {_cell(key.doc)} |"
        )
    return "\n".join(rows) + "\n"


def topic_configs() -> str:
    return _table(TOPIC_KEYS)


def broker_configs() -> str:
    return _table(
        {k: v for k, v in BROKER_KEYS.items() if k not in TOPIC_KEYS}, dynamic_column=True
    )


def quota_configs() -> str:
    return _table(QUOTA_KEYS)


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
    return {
        "topic-configs": topic_configs(),
        "broker-configs": broker_configs(),
        "quota-configs": quota_configs(),
        "service-flags": service_flags(),
    }


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
    return ["topic-configs", "broker-configs", "quota-configs", "service-flags"]


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
