#!/usr/bin/env bash
# Regenerates the Python stubs in headwater/v1/ from proto/ (the only source of the API).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -f headwater/v1/*_pb2*.py headwater/v1/*_pb2*.pyi
python -m grpc_tools.protoc -I proto \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  proto/headwater/v1/*.proto
touch headwater/v1/__init__.py
