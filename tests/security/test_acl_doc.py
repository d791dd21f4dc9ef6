"""docs/security.md's table of what every RPC needs matches the one RPC table
(headwater/platform/auth/rules.py, rendered by scripts/gen_acl_doc.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.platform.auth.rules import RULES
from tests.helpers.scripts import load_script

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"


GEN = load_script("gen_acl_doc")


def test_acl_operations_table_is_current() -> None:
    generated = GEN.table()
    assert GEN.extract(DOC.read_text()) == generated, (
        "docs/security.md is stale: run python scripts/gen_acl_doc.py --write"
    )
    rows = [line for line in generated.splitlines() if line.startswith("| `")]
    assert len(rows) == len(RULES)
    by_rpc = {r.split("|")[1].strip(" `"): r for r in rows}
    # request-dependent checks are all found by the sample requests
    assert "CLUSTER_ACTION CLUSTER; READ TOPIC" in by_rpc["Broker/Fetch"]
    assert "WRITE TRANSACTIONAL_ID; IDEMPOTENT_WRITE CLUSTER" in by_rpc["Broker/InitProducerId"]
    configs = by_rpc["Controller/DescribeConfigs"]
    assert "DESCRIBE_CONFIGS TOPIC; DESCRIBE_CONFIGS CLUSTER" in configs
    assert "CREATE TOPIC or CREATE CLUSTER" in by_rpc["Controller/CreateTopics"]
    assert "| WRITE TOPIC |" in by_rpc["Broker/Produce"]
