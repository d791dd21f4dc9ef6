#!/usr/bin/env bash
# Build the Kubernetes tools the chart and operator tests need, from the Go module proxy, into a
# cache directory that later runs (and CI on the same machine) reuse:
#
#   ${HEADWATER_K8S_CACHE:-~/.cache/headwater-k8s}/<KUBE_VERSION>-<recipe>/bin/{kube-apiserver,kubectl,helm}
#
# <recipe> is 12 hex of a sha256 over the versions below, the Go version and this script without
# its comment lines: a changed recipe builds into a new directory beside the old one (nothing in
# use is overwritten). Idempotent: a binary already present (and runnable) is not rebuilt, so a
# warm run takes < 1 s.
# A cold run on the 2-core machine, measured while other builds and tests ran: kube-apiserver
# 570 s, kubectl 23 s (it reuses kube-apiserver's compiled packages), helm ~280 s: ~15 minutes,
# plus ~1 GB of modules in the Go module cache (downloads take well under a minute).
# The single-node Kubernetes (scripts/k8s/node.sh) also needs kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy (ONE go build with every missing command; with
# kube-apiserver's packages already compiled: 930 s under load average 13) and coredns.
#
# Usage: bash scripts/k8s/build-tools.sh [--print-bin]
#   --print-bin   only print the bin directory (nothing is built)
# Environment: KUBE_VERSION (k8s.io/kubernetes tag), HELM_VERSION, COREDNS_VERSION,
# HEADWATER_K8S_CACHE, GO_BUILD_P (go build/install -p, default: the number of CPUs; set 1 on a
# machine busy with other work), TOOLS (space-separated subset of
# "kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl helm
# coredns"; default: the three the chart tests need).
#
# Why a wrapper module for Kubernetes: k8s.io/kubernetes requires its staging modules at v0.0.0 and
# maps them with `replace k8s.io/X => ./staging/src/k8s.io/X`, so `go install k8s.io/kubernetes/cmd/...@v1.x`
# is refused. In a throw-away main module the dependency's replaces are ignored and we pin each
# staging module to its published tag (k8s.io/X v0.<minor>.<patch>).
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
HELM_VERSION="${HELM_VERSION:-v3.21.4}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
CACHE="${HEADWATER_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/headwater-k8s}"
TOOLS="${TOOLS:-kube-apiserver kubectl helm}"

if ! command -v go >/dev/null 2>&1; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH="$PATH:/usr/local/go/bin"
  else
    echo "build-tools.sh: Go is needed to build $TOOLS (none on PATH or in /usr/local/go)" >&2
    exit 1
  fi
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
P="${GO_BUILD_P:-$(nproc)}"

RECIPE="$(
  echo "$KUBE_VERSION $HELM_VERSION $COREDNS_VERSION $(go env GOVERSION)"
  grep -v '^[[:space:]]*#' "${BASH_SOURCE[0]}"
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

# ---------------------------------------------------------------- Kubernetes commands
# Every missing k8s.io/kubernetes command is built by ONE `go build` (several main packages with
# `-o DIR/`): they share most of their packages, so building kubelet beside kube-apiserver costs
# far less than a build of its own. Cached by version: the binaries live under <KUBE_VERSION>/bin.
K8S_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl"
k8s_targets=()
for t in $K8S_CMDS; do
  want "$t" || continue
  if [ "$t" = kubectl ]; then have kubectl version --client && continue
  else have "$t" --version && continue; fi
  k8s_targets+=("$t")
done

if [ "${#k8s_targets[@]}" -gt 0 ]; then
  SV="v0.${KUBE_VERSION#v1.}"
  MINOR="$(echo "$KUBE_VERSION" | cut -d. -f2)"
  WRAP="$ROOT/k8s-wrapper"
  mkdir -p "$WRAP"
  cd "$WRAP"
  if [ ! -f go.mod ]; then
    go mod init local.invalid/k8s-wrapper >/dev/null 2>&1
    go mod edit -go=1.24.0 -godebug=default=go1.24
  fi
  if ! grep -q "k8s.io/kubernetes $KUBE_VERSION" go.mod; then
    log "resolving k8s.io/kubernetes@$KUBE_VERSION staging modules"
    GOMOD="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
      python3 -c 'import sys, json; print(json.load(sys.stdin)["GoMod"])')"
    for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$GOMOD" | sort -u); do
      go mod edit -replace="$m=$m@$SV"
    done
    go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION"
  fi
  pkgs=()
  for t in "${k8s_targets[@]}"; do
    log "go get k8s.io/kubernetes/cmd/$t@$KUBE_VERSION"
    go get "k8s.io/kubernetes/cmd/$t@$KUBE_VERSION"
    pkgs+=("k8s.io/kubernetes/cmd/$t")
  done
  LDF="-s -w"
  for k in "gitVersion=$KUBE_VERSION" gitMajor=1 "gitMinor=$MINOR" gitTreeState=clean; do
    LDF="$LDF -X k8s.io/component-base/version.$k -X k8s.io/client-go/pkg/version.$k"
  done
  log "building ${k8s_targets[*]} $KUBE_VERSION (one go build)"
  start=$SECONDS
  OUT="$ROOT/k8s-out"
  rm -rf "$OUT"
  mkdir -p "$OUT"
  # with several main packages, `-o DIR/` writes one binary per package into DIR
  go build -p "$P" -trimpath -ldflags "$LDF" -o "$OUT/" "${pkgs[@]}"
  for t in "${k8s_targets[@]}"; do mv "$OUT/$t" "$BIN/$t"; done
  rmdir "$OUT"
  log "built ${k8s_targets[*]} in $((SECONDS - start)) s"
fi

# ---------------------------------------------------------------- helm
if want helm && ! have helm version; then
  # helm v3 reads the Kubernetes version it assumes for `helm template`/`helm lint` from these
  # variables (default v1.20.0); set them to the kube-apiserver's minor.
  MINOR="$(echo "$KUBE_VERSION" | cut -d. -f2)"
  log "building helm $HELM_VERSION"
  start=$SECONDS
  GOBIN="$ROOT/helm-gobin" go install -p "$P" -trimpath -ldflags "-s -w \
    -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$MINOR \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$MINOR" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mv "$ROOT/helm-gobin/helm" "$BIN/helm"
  log "built helm in $((SECONDS - start)) s"
fi

# ---------------------------------------------------------------- CoreDNS
# The node's cluster DNS. CoreDNS's go.mod has no replace directives, so a plain
# `go install module@version` works (it needs Go >= 1.26).
if want coredns && ! have coredns -version; then
  log "building coredns $COREDNS_VERSION"
  start=$SECONDS
  GOBIN="$ROOT/coredns-gobin" go install -p "$P" -trimpath -ldflags "-s -w" \
    "github.com/coredns/coredns@$COREDNS_VERSION"
  mv "$ROOT/coredns-gobin/coredns" "$BIN/coredns"
  log "built coredns in $((SECONDS - start)) s"
fi

for t in $TOOLS; do
  [ -x "$BIN/$t" ] || { echo "build-tools.sh: $BIN/$t missing after the build" >&2; exit 1; }
done
log "tools ready in $BIN: $TOOLS"
