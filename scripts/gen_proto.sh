#!/usr/bin/env bash
# Regenerates the Python stubs in headwater/v1/ from proto/ (the only source of the API).
#
#   bash scripts/gen_proto.sh            # rewrite headwater/v1/ in this checkout (`make proto`)
#   bash scripts/gen_proto.sh OUT_DIR    # write OUT_DIR/headwater/v1/ instead (used by
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
