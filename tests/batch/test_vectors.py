"""The test vectors in docs/batch-format.md hold in both directions and match their generator."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import crc32c
import pytest

from headwater.batch import decode_batches, validate_batches
from headwater.client.partitioner import crc32c_partition

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "batch-format.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "batch_vectors", ROOT / "scripts" / "batch_vectors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
TEXT = DOC.read_text()
VECTOR_RE = re.compile(r"### Vector (\w+):.*?```json\n(.*?)\n```.*?```hex\n(.*?)\n```", re.DOTALL)
VECTORS = [(m[1], json.loads(m[2]), bytes.fromhex(m[3])) for m in VECTOR_RE.finditer(TEXT)]
PARTITION_ROW = re.compile(r"^\| `(\".*\")` \| `0x([0-9a-f]{8})` \| (\d+) \| (\d+) \|$", re.M)


def test_doc_has_the_promised_vectors() -> None:
    names = [name for name, _, _ in VECTORS]
    assert names == ["a", "b", "c", "d"]
    codecs = [inputs.get("compression_type", "none") for _, inputs, _ in VECTORS]
    assert "gzip" in codecs and "none" in codecs


def test_generated_section_is_current() -> None:
    start = TEXT.index(GEN.BEGIN) + len(GEN.BEGIN) + 1
    assert TEXT[start : TEXT.index(GEN.END)] == GEN.render(), (
        "docs/batch-format.md is stale: run python scripts/batch_vectors.py --write"
    )


@pytest.mark.parametrize(("name", "inputs", "raw"), VECTORS, ids=[v[0] for v in VECTORS])
def test_encode_gives_the_documented_bytes(name: str, inputs: dict, raw: bytes) -> None:
    assert GEN.encode_inputs(inputs) == raw


def _b(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


@pytest.mark.parametrize(("name", "inputs", "raw"), VECTORS, ids=[v[0] for v in VECTORS])
def test_decode_gives_the_documented_inputs(name: str, inputs: dict, raw: bytes) -> None:
    assert len(raw) % 8 == 0
    [batch] = decode_batches(raw)
    n = len(inputs["values"])
    h = batch.header
    assert h.base_offset == inputs.get("base_offset", 0)
    assert h.partition_leader_epoch == inputs.get("partition_leader_epoch", -1)
    assert h.compression.name.lower() == inputs.get("compression_type", "none")
    assert batch.values() == [_b(v) for v in inputs["values"]]
    assert batch.keys() == [_b(k) for k in inputs.get("keys") or [None] * n]
    expected_headers = [
        tuple((k, _b(v)) for k, v in hs) for hs in inputs.get("headers") or [[]] * n
    ]
    assert batch.headers() == expected_headers
    ts = inputs["timestamps"]
    assert batch.timestamps().tolist() == ([ts] * n if isinstance(ts, int) else ts)
    deltas = inputs.get("offset_deltas") or list(range(n))
    assert batch.offsets().tolist() == [h.base_offset + d for d in deltas]
    if h.base_offset == 0:  # what a producer would send: the broker accepts it
        validate_batches(raw, max_batch_bytes=len(raw))


def test_partitioner_vectors() -> None:
    rows = PARTITION_ROW.findall(TEXT)
    assert len(rows) == len(GEN.PARTITIONER_KEYS) >= 5
    assert ('"123456789"', "e3069283", "3808858755", "0") in rows  # the CRC-32C check value
    for key_json, crc_hex, crc_dec, partition in rows:
        key = json.loads(key_json).encode()
        crc = crc32c.crc32c(key)
        assert crc == int(crc_hex, 16) == int(crc_dec)
        assert crc % 3 == int(partition)
        assert crc32c_partition(key, 3) == int(partition)  # the Python client's partitioner
