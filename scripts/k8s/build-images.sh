#!/usr/bin/env bash
# Build Headwater's images without a Docker engine: the services image (broker, controller,
# coordinator), the operator image, an etcd image and the Spark image (PySpark, Java 17 and
# headwater_spark, for Spark jobs in pods), as OCI archives that
# `ctr -n k8s.io images import` takes. Cached and idempotent: a Python-only change rebuilds only
# the top layer. See scripts/k8s/build_images.py and docs/kubernetes.md ("Images").
#
#   scripts/k8s/build-images.sh [headwater|headwater-operator|etcd|headwater-spark ...] [--refresh]
#   scripts/k8s/build-images.sh --skaffold     # skaffold's custom builder: builds $IMAGE
#
# Prints one line per image: NAME REFERENCE ARCHIVE SIZE; the same, with digests, goes to
# $HEADWATER_IMAGE_CACHE/out/images.json (default ~/.cache/headwater-k8s/images).
# Needs root and Debian's mmdebstrap and umoci (installed with apt-get when missing).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

missing=()
for tool in mmdebstrap umoci; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[build-images] apt-get install ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi

# the host interpreter that fetches wheels and builds Headwater's wheel: the project's venv
# (it has setuptools and the pip cache), else python3.11
PY="$REPO/.venv/bin/python"
[ -x "$PY" ] || PY="$(command -v python3.11)"

if [ "${1:-}" = "--skaffold" ]; then
  # skaffold's custom builder: $IMAGE is the full reference skaffold wants, e.g.
  # headwater-operator:abc123; the artifact's name is the repository's last component
  shift
  : "${IMAGE:?skaffold sets IMAGE}"
  name="${IMAGE%:*}"; name="${name##*/}"
  [ "$name" != "headwater-etcd" ] || name=etcd
  out="$("$PY" "$HERE/build_images.py" --python "$PY" --ref "$IMAGE" "$name" "$@")"
  echo "$out"
  # the node's import step (optional): HEADWATER_IMAGE_IMPORT=cmd gets the archive path
  if [ -n "${HEADWATER_IMAGE_IMPORT:-}" ]; then
    $HEADWATER_IMAGE_IMPORT "$(echo "$out" | awk '{print $3}')"
  fi
  exit 0
fi
exec "$PY" "$HERE/build_images.py" --python "$PY" "$@"
