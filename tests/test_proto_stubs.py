"""The committed stubs are exactly what `make proto` generates: headwater/v1/ from proto/, and
headwater/platform/etcd/etcdserverpb/ from the etcd rpc.proto beside them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ETCD_STUBS = Path("headwater", "platform", "etcd", "etcdserverpb")


def _generate(out: Path) -> None:
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(out)],
        check=True,
        env=env,
        timeout=120,
    )


def _stubs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.glob("*_pb2*.py*")}


def test_stubs_are_reproducible_from_proto(tmp_path: Path) -> None:
    _generate(tmp_path)
    generated = _stubs(tmp_path / "headwater" / "v1")
    committed = _stubs(ROOT / "headwater" / "v1")
    protos = sorted(p.stem for p in (ROOT / "proto" / "headwater" / "v1").glob("*.proto"))
    assert protos, "no .proto files found"
    # each .proto yields _pb2.py, _pb2.pyi and _pb2_grpc.py
    assert len(generated) == 3 * len(protos)
    assert sorted(generated) == sorted(committed), "stub files differ: run `make proto`"
    stale = [name for name in generated if generated[name] != committed[name]]
    assert not stale, f"stale stubs {stale}: run `make proto` and commit headwater/v1/"


def test_etcd_stubs_are_reproducible_from_their_proto(tmp_path: Path) -> None:
    _generate(tmp_path)
    generated = _stubs(tmp_path / ETCD_STUBS)
    committed = _stubs(ROOT / ETCD_STUBS)
    assert sorted(generated) == ["rpc_pb2.py", "rpc_pb2.pyi", "rpc_pb2_grpc.py"]
    assert sorted(committed) == sorted(generated), "stub files differ: run `make proto`"
    stale = [name for name in generated if generated[name] != committed[name]]
    assert not stale, f"stale stubs {stale}: run `make proto` and commit {ETCD_STUBS}/"
