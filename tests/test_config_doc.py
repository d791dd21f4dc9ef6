"""docs/configuration.md's generated tables match the code (scripts/gen_config_doc.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from headwater.config import TOPIC_KEYS

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "configuration.md"


def _generator() -> ModuleType:
    path = ROOT / "scripts" / "gen_config_doc.py"
    spec = importlib.util.spec_from_file_location("gen_config_doc", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
STALE = "docs/configuration.md is stale: run python scripts/gen_config_doc.py --write"


def test_topic_config_table_is_current() -> None:
    doc = GEN.extract_sections(DOC.read_text())
    assert doc["topic-configs"] == GEN.topic_configs(), STALE
    for name in TOPIC_KEYS:
        assert f"| `{name}` |" in doc["topic-configs"]


def test_service_flags_are_current() -> None:
    doc = GEN.extract_sections(DOC.read_text())
    generated = GEN.service_flags()
    assert doc["service-flags"] == generated, STALE
    assert "python -m services.broker" in generated
    assert "--data-dirs" in generated
    assert "### Local cluster: `headwater dev`" in generated and "--data-dir DATA_DIR" in generated
