#!/usr/bin/env bash
# Build a Go command-line tool the project's checks use from the Go module proxy, once per
# version, into a cache directory that later runs (and CI on the same machine) reuse, and print
# the path of the binary:
#
#   ${HEADWATER_TOOLS_CACHE:-~/.cache/headwater-tools}/<tool>-<version>-<go version>/<tool>
#
# Usage: bash scripts/tools/go-tool.sh TOOL     build if missing, print the binary's path
#        bash scripts/tools/go-tool.sh TOOL --print-bin   only print it (nothing is built)
# Tools (their versions are pinned here; a new version builds into a new directory):
#   buf      github.com/bufbuild/buf/cmd/buf          (buf lint / buf breaking: scripts/tools/buf.sh);
#            on Linux x86_64/aarch64 with npm, Buf's own release binary from npm instead
#   grpcurl  github.com/fullstorydev/grpcurl/cmd/grpcurl   (tests/api/test_grpcurl.py, docs/api.md)
#   protoc-gen-go       google.golang.org/protobuf/cmd/protoc-gen-go   (scripts/gen_go.sh: the
#   protoc-gen-go-grpc  google.golang.org/grpc/cmd/protoc-gen-go-grpc   Go client's generated code)
# Environment: BUF_VERSION, GRPCURL_VERSION, PROTOC_GEN_GO_VERSION, PROTOC_GEN_GO_GRPC_VERSION,
# HEADWATER_TOOLS_CACHE, GOCACHE / GOMODCACHE (Go's
# own). Idempotent: a runnable binary already present is not rebuilt (< 1 s). The build runs
# under `nice -n 19` so that it never slows a test run sharing the machine.
set -euo pipefail

BUF_VERSION="${BUF_VERSION:-v1.75.0}"
GRPCURL_VERSION="${GRPCURL_VERSION:-v1.9.3}"
PROTOC_GEN_GO_VERSION="${PROTOC_GEN_GO_VERSION:-v1.36.12}"
PROTOC_GEN_GO_GRPC_VERSION="${PROTOC_GEN_GO_GRPC_VERSION:-v1.6.2}"
CACHE="${HEADWATER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/headwater-tools}"

usage="buf|grpcurl|protoc-gen-go|protoc-gen-go-grpc"
tool="${1:?usage: go-tool.sh $usage [--print-bin]}"
case "$tool" in
  buf) pkg=github.com/bufbuild/buf/cmd/buf version="$BUF_VERSION" ;;
  grpcurl) pkg=github.com/fullstorydev/grpcurl/cmd/grpcurl version="$GRPCURL_VERSION" ;;
  protoc-gen-go) pkg=google.golang.org/protobuf/cmd/protoc-gen-go version="$PROTOC_GEN_GO_VERSION" ;;
  protoc-gen-go-grpc)
    pkg=google.golang.org/grpc/cmd/protoc-gen-go-grpc version="$PROTOC_GEN_GO_GRPC_VERSION" ;;
  *) echo "go-tool.sh: unknown tool $tool ($usage)" >&2; exit 2 ;;
esac

if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH="$PATH:/usr/local/go/bin"
  else
    echo "go-tool.sh: Go is needed to build $tool (none on PATH or in /usr/local/go)" >&2
    exit 1
  fi
fi
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

dir="$CACHE/$tool-$version-$(go env GOVERSION)"
bin="$dir/$tool"
if [ "${2:-}" = "--print-bin" ]; then
  echo "$bin"
  exit 0
fi

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) npm_platform=linux-x64 ;;
  Linux-aarch64) npm_platform=linux-aarch64 ;;
  *) npm_platform="" ;;
esac

runnable() { [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; }
if ! runnable; then
  mkdir -p "$dir"
  # a lock so that two runs never build into the same place at once
  exec 9>"$dir/.lock"
  if command -v flock >/dev/null 2>&1; then
    flock 9
  fi
  if ! runnable; then
    start=$(date +%s)
    if [ "$tool" = buf ] && [ -n "$npm_platform" ] && command -v npm >/dev/null 2>&1; then
      # Buf publishes its release binaries to npm too (@bufbuild/buf-<os>-<arch>, the same
      # statically linked Go build; npm checks the tarball's sha512 from the registry):
      # ~30 s instead of ~8 min of compiling buf
      echo "[go-tool $(date +%H:%M:%S)] fetching buf ${version#v} from npm into $dir" >&2
      rm -rf "$dir/.npm"
      nice -n 19 npm install --no-audit --no-fund --ignore-scripts --prefix "$dir/.npm" \
        "@bufbuild/buf-$npm_platform@${version#v}" >&2
      mv "$dir/.npm/node_modules/@bufbuild/buf-$npm_platform/bin/buf" "$bin"
      rm -rf "$dir/.npm"
    else
      echo "[go-tool $(date +%H:%M:%S)] building $pkg@$version into $dir" >&2
      GOBIN="$dir/.tmp" nice -n 19 go install -trimpath "$pkg@$version" >&2
      mv "$dir/.tmp/$tool" "$bin"
      rmdir "$dir/.tmp"
    fi
    echo "[go-tool $(date +%H:%M:%S)] $tool ready in $(($(date +%s) - start)) s" >&2
  fi
fi
echo "$bin"
