#!/usr/bin/env bash
# Build the Kubernetes tools from the Go module proxy, into a cache directory that later runs (and
# CI on the same machine) reuse:
#
#   ${HEADWATER_K8S_CACHE:-~/.cache/headwater-k8s}/<KUBE_VERSION>-<recipe>/bin/<tool>
#
# <recipe> is 12 hex of a sha256 over the versions below, the Go version, this script without its
# comment lines and scripts/k8s/tools/: a change to any of them builds into a new directory beside
# the old one (nothing in use is overwritten). Idempotent: a binary already present (and
# runnable) is not rebuilt, so a warm run takes < 1 s.
#
# Tools: kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl (from
# k8s.io/kubernetes), helm (helm.sh/helm/v3/cmd/helm) and coredns (scripts/k8s/tools/coredns: a
# main package with only the plugins the test node's Corefile uses). Every missing tool asked for
# is built by ONE `go build` of several main packages in ONE wrapper module, so the packages they
# share (client-go, apimachinery, grpc, ...) are compiled once. That needs versions that agree on
# k8s.io/*: helm v3.19.x and CoreDNS v1.14.1 require client-go v0.34.x like Kubernetes v1.34
# (helm v3.21 and CoreDNS v1.15 want v0.36/v0.37). Times: docs/kubernetes.md.
#
# Usage: bash scripts/k8s/build-tools.sh [--print-bin]
#   --print-bin   only print the bin directory (nothing is built)
# Environment: KUBE_VERSION (k8s.io/kubernetes tag), HELM_VERSION, COREDNS_VERSION,
# HEADWATER_K8S_CACHE, GO_BUILD_P (go build -p, default: the number of CPUs; set 1 on a machine
# busy with other work), TOOLS (space-separated subset of "kube-apiserver kube-controller-manager
# kube-scheduler kubelet kube-proxy kubectl helm coredns"; default: the three the chart tests
# need), GOCACHE / GOMODCACHE (Go's own).
#
# Why a wrapper module: k8s.io/kubernetes requires its staging modules at v0.0.0 and maps them
# with `replace k8s.io/X => ./staging/src/k8s.io/X`, so `go install k8s.io/kubernetes/cmd/...@v1.x`
# is refused. In a throw-away main module the dependency's replaces are ignored and we pin each
# staging module to its published tag (k8s.io/X v0.<minor>.<patch>); helm and CoreDNS then use
# the same k8s.io/* versions.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
HELM_VERSION="${HELM_VERSION:-v3.19.5}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.1}"
CACHE="${HEADWATER_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/headwater-k8s}"
TOOLS="${TOOLS:-kube-apiserver kubectl helm}"

if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH="$PATH:/usr/local/go/bin"
  else
    echo "build-tools.sh: Go is needed to build the Kubernetes tools (none on PATH or in /usr/local/go)" >&2
    exit 1
  fi
fi
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

RECIPE="$(
  echo "$KUBE_VERSION $HELM_VERSION $COREDNS_VERSION $(go env GOVERSION)"
  grep -v '^[[:space:]]*#' "${BASH_SOURCE[0]}"
  find "$HERE/tools" -type f | sort | xargs cat
)"
RECIPE="$(echo "$RECIPE" | sha256sum | cut -c1-12)"
ROOT="$CACHE/$KUBE_VERSION-$RECIPE"
BIN="$ROOT/bin"

if [ "${1:-}" = "--print-bin" ]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$BIN"

# a lock so two test sessions (or a test and a developer) never build into the same place at once
exec 9>"$ROOT/.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi

have() { [ -x "$BIN/$1" ] && "$BIN/$1" "${@:2}" >/dev/null 2>&1; }
log() { echo "[build-tools $(date +%H:%M:%S)] $*"; }
want() { case " $TOOLS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

K8S_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
targets=()
for t in $K8S_CMDS helm coredns; do
  want "$t" || continue
  case "$t" in
    kubectl) have kubectl version --client && continue ;;
    helm) have helm version && continue ;;
    coredns) have coredns -version && continue ;;
    *) have "$t" --version && continue ;;
  esac
  targets+=("$t")
done

if [ "${#targets[@]}" -gt 0 ]; then
  SV="v0.${KUBE_VERSION#v1.}"
  MINOR="$(echo "$KUBE_VERSION" | cut -d. -f2)"
  WRAP="$ROOT/wrapper"
  mkdir -p "$WRAP/coredns"
  cd "$WRAP"
  if [ ! -f .resolved ]; then  # go.mod complete (an interrupted resolution starts again)
    rm -f go.mod go.sum
    log "resolving k8s.io/kubernetes@$KUBE_VERSION, helm $HELM_VERSION, coredns $COREDNS_VERSION"
    start=$SECONDS
    go mod init local.invalid/k8s-wrapper >/dev/null 2>&1
    GOMOD="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
      python3 -c 'import sys, json; print(json.load(sys.stdin)["GoMod"])')"
    for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$GOMOD" | sort -u); do
      go mod edit -replace="$m=$m@$SV"
    done
    cp "$HERE/tools/coredns/main.go" coredns/main.go
    # requirements only: `go build -mod=mod` then downloads the modules of the packages it
    # compiles (`go get` of CoreDNS's module would fetch every plugin's SDKs too)
    go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION" -require="helm.sh/helm/v3@$HELM_VERSION" \
      -require="github.com/coredns/coredns@$COREDNS_VERSION"
    touch .resolved
    log "modules resolved in $((SECONDS - start)) s"
  fi
  pkgs=()
  for t in "${targets[@]}"; do
    case "$t" in
      helm) pkgs+=(helm.sh/helm/v3/cmd/helm) ;;
      coredns) pkgs+=(./coredns) ;;
      *) pkgs+=("k8s.io/kubernetes/cmd/$t") ;;
    esac
  done
  LDF="-s -w"
  for k in "gitVersion=$KUBE_VERSION" gitMajor=1 "gitMinor=$MINOR" gitTreeState=clean; do
    LDF="$LDF -X k8s.io/component-base/version.$k -X k8s.io/client-go/pkg/version.$k"
  done
  # helm reads the Kubernetes version it assumes for `helm template`/`helm lint` from these
  # variables (default v1.20.0): the kube-apiserver's minor
  LDF="$LDF -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for p in pkg/chartutil pkg/lint/rules; do
    LDF="$LDF -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$MINOR"
  done
  P="${GO_BUILD_P:-$(nproc)}"
  log "building ${targets[*]} (one go build, -p $P)"
  start=$SECONDS
  OUT="$ROOT/out"
  rm -rf "$OUT"
  mkdir -p "$OUT"
  # with several main packages, `-o DIR/` writes one binary per package into DIR (named after
  # the package path's last element; one package alone is written as DIR/<name> too)
  go build -p "$P" -trimpath -ldflags "$LDF" -o "$OUT/" "${pkgs[@]}"
  for t in "${targets[@]}"; do mv "$OUT/$t" "$BIN/$t"; done
  rmdir "$OUT"
  log "built ${targets[*]} in $((SECONDS - start)) s"
fi

for t in $TOOLS; do
  [ -x "$BIN/$t" ] || { echo "build-tools.sh: $BIN/$t missing after the build" >&2; exit 1; }
done
log "tools ready in $BIN: $TOOLS"
