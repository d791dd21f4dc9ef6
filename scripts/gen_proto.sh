#!/usr/bin/env bash
# Regenerates the Python stubs in headwater/v1/ from proto/ (the only source of the API), and
# the grpc.aio stubs of etcd's v3 API in headwater/platform/etcd/etcdserverpb/ from the
# rpc.proto beside them (the part of etcd's API the etcd client uses).
#
#   bash scripts/gen_proto.sh            # rewrite headwater/v1/ in this checkout (`make proto`)
#   bash scripts/gen_proto.sh OUT_DIR    # write under OUT_DIR/headwater/ instead (used by
#                                        # tests/test_proto_stubs.py to check the committed stubs)
#
# Uses grpcio-tools (pinned in pyproject.toml, so the output is reproducible) through
# $PYTHON, default `python` on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-.}"
PYTHON="${PYTHON:-python}"
mkdir -p "$OUT/headwater/v1"
rm -f "$OUT"/headwater/v1/*_pb2*.py "$OUT"/headwater/v1/*_pb2*.pyi
"$PYTHON" -m grpc_tools.protoc -I proto \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
  proto/headwater/v1/*.proto
touch "$OUT/headwater/v1/__init__.py"
ETCD=headwater/platform/etcd/etcdserverpb
mkdir -p "$OUT/$ETCD"
rm -f "$OUT/$ETCD"/*_pb2*.py "$OUT/$ETCD"/*_pb2*.pyi
"$PYTHON" -m grpc_tools.protoc -I . \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
  "$ETCD/rpc.proto"
