"""The committed stubs in headwater/v1/ are exactly what `make proto` generates from proto/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_stubs_are_reproducible_from_proto(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)],
        check=True,
        env=env,
        timeout=120,
    )
    generated = {p.name: p.read_bytes() for p in (tmp_path / "headwater" / "v1").glob("*_pb2*.py*")}
    committed = {p.name: p.read_bytes() for p in (ROOT / "headwater" / "v1").glob("*_pb2*.py*")}
    protos = sorted(p.stem for p in (ROOT / "proto" / "headwater" / "v1").glob("*.proto"))
    assert protos, "no .proto files found"
    # each .proto yields _pb2.py, _pb2.pyi and _pb2_grpc.py
    assert len(generated) == 3 * len(protos)
    assert sorted(generated) == sorted(committed), "stub files differ: run `make proto`"
    stale = [name for name in generated if generated[name] != committed[name]]
    assert not stale, f"stale stubs {stale}: run `make proto` and commit headwater/v1/"
