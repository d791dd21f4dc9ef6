"""docs/configuration.md's generated tables match the code (scripts/gen_config_doc.py)."""

from __future__ import annotations

from pathlib import Path

from headwater.config import TOPIC_KEYS
from tests.helpers.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "configuration.md"


GEN = load_script("gen_config_doc")
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
