"""docs/api.md documents every service, method, message and enum of proto/, and its generated
reference matches the protos and their comments (scripts/gen_api_doc.py)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


GEN = load_script("gen_api_doc")


def test_reference_is_current_and_complete() -> None:
    doc = DOC.read_text()
    assert GEN.extract(doc) == GEN.reference(), (
        "docs/api.md is stale: run python scripts/gen_api_doc.py --write"
    )
    fds = GEN.descriptor_set()
    for f in fds.file:
        for svc in f.service:
            assert f"### headwater.v1.{svc.name}\n" in doc
            for m in svc.method:
                assert f"#### {svc.name}.{m.name}\n" in doc
        for msg in f.message_type:
            assert f"### {msg.name}\n" in doc
        for enum in f.enum_type:
            assert f"### {enum.name}\n" in doc
    assert sum(len(f.service) for f in fds.file) >= 5


def test_the_grpcurl_session_shows_minimal_produce_and_fetch() -> None:
    doc = DOC.read_text()
    session = doc[doc.index("## A first session with grpcurl") : doc.index(GEN.BEGIN)]
    for call in ("Controller/CreateTopics", "Broker/ProduceRecords", "Broker/FetchRecords"):
        assert f"headwater.v1.{call}" in session
    assert '-d \'{"topic": "greetings", "partition": 0}\'' in session
