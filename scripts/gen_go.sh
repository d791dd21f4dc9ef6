#!/usr/bin/env bash
# Regenerates the Go client's protobuf and gRPC code (clients/go/gen/headwater/v1/) from proto/,
# the only source of the API, with buf and the protoc-gen-go / protoc-gen-go-grpc plugins (each
# built once per pinned version from the Go module proxy by scripts/tools/go-tool.sh).
#
#   bash scripts/gen_go.sh            # rewrite clients/go/gen/ in this checkout
#   bash scripts/gen_go.sh OUT_DIR    # write OUT_DIR/headwater/v1/ instead (used by
#                                     # tests/clients/test_go_client.py to check the committed code)
#
# The protos' go_package (headwater.dev/proto/headwater/v1) is overridden by buf's managed mode to
# the client module's package headwater.dev/clients/go/gen/headwater/v1 (package headwaterv1).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-clients/go/gen}"
OUT="$(mkdir -p "$OUT" && cd "$OUT" && pwd)"

buf="$(bash scripts/tools/go-tool.sh buf)"
gen_go="$(bash scripts/tools/go-tool.sh protoc-gen-go)"
gen_grpc="$(bash scripts/tools/go-tool.sh protoc-gen-go-grpc)"

rm -f "$OUT"/headwater/v1/*.pb.go
template=$(cat <<JSON
{
  "version": "v2",
  "managed": {
    "enabled": true,
    "override": [
      {"file_option": "go_package_prefix", "value": "headwater.dev/clients/go/gen"}
    ]
  },
  "plugins": [
    {"local": "$gen_go", "out": "$OUT", "opt": ["paths=source_relative"]},
    {"local": "$gen_grpc", "out": "$OUT", "opt": ["paths=source_relative"]}
  ]
}
JSON
)
"$buf" generate --template "$template" proto
