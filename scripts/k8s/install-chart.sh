#!/usr/bin/env bash
# Install charts/headwater onto the test node (scripts/k8s/node.sh) with the project's images.
#
#   scripts/k8s/install-chart.sh [HELM_ARGS...]
#
# Brings the node up if needed, imports the images that scripts/k8s/build-images.sh built (it
# lists them in $HEADWATER_IMAGE_CACHE/out/images.json, default ~/.cache/headwater-k8s/images),
# creates a StorageClass `headwater-local` (no provisioner, WaitForFirstConsumer, the default
# class) with static hostPath PersistentVolumes under the node's directory (owned by uid 10001,
# the images' user), then `helm upgrade --install hw charts/headwater -n headwater --wait`
# changing only the image references (pullPolicy Never: the node has no registry) and the broker
# CPU request (3 x 500m and the rest do not fit 2 cores). Every client runs through in-node.
# RELEASE and NAMESPACE (default hw, headwater) name another release, e.g. a test's own.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
IMAGES_JSON="${HEADWATER_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/headwater-k8s/images}/out/images.json"
PVS="${HEADWATER_K8S_NODE_PVS:-8}"
RELEASE="${RELEASE:-hw}"
NAMESPACE="${NAMESPACE:-headwater}"

bash "$HERE/node.sh" up >/dev/null
eval "$(bash "$HERE/node.sh" env)"
[ -f "$IMAGES_JSON" ] || { echo "install-chart.sh: no $IMAGES_JSON: build the images first (scripts/k8s/build-images.sh)" >&2; exit 1; }
ref() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]][sys.argv[3]])' "$IMAGES_JSON" "$1" "$2"; }
for name in headwater headwater-operator etcd; do "$HERE/import-images" "$(ref "$name" archive)"; done
split() { local r; r="$(ref "$1" ref)"; echo "${r%:*} ${r##*:}"; }
read -r HW_REPO HW_TAG < <(split headwater)
read -r OP_REPO OP_TAG < <(split headwater-operator)
read -r ETCD_REPO ETCD_TAG < <(split etcd)

{
  cat <<EOT
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: headwater-local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOT
  for i in $(seq 1 "$PVS"); do
    mkdir -p "$NODE_DIR/pv/pv$i"
    chown 10001:10001 "$NODE_DIR/pv/pv$i"
    chmod 0770 "$NODE_DIR/pv/pv$i"
    cat <<EOT
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: headwater-local-pv$i}
spec:
  capacity: {storage: 50Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: headwater-local
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $NODE_DIR/pv/pv$i, type: Directory}
EOT
  done
} | "$HERE/in-node" kubectl apply -f - >/dev/null

start=$SECONDS
"$HERE/in-node" helm upgrade --install "$RELEASE" "$REPO/charts/headwater" \
  --namespace "$NAMESPACE" --create-namespace --wait --timeout 10m \
  --set image.repository="$HW_REPO" --set image.tag="$HW_TAG" --set image.pullPolicy=Never \
  --set operator.image.repository="$OP_REPO" --set operator.image.tag="$OP_TAG" \
  --set operator.image.pullPolicy=Never \
  --set etcd.image.repository="$ETCD_REPO" --set etcd.image.tag="$ETCD_TAG" \
  --set etcd.image.pullPolicy=Never \
  --set broker.resources.requests.cpu=200m "$@"
echo "[install-chart] helm upgrade --install --wait returned after $((SECONDS - start)) s" >&2
"$HERE/in-node" kubectl -n "$NAMESPACE" get pods -o wide
