#!/usr/bin/env bash
# The simulated cluster's one real node: a kubelet (built by build.sh, same version as the control plane)
# with its own containerd 1.6 (Debian's, own config, socket and state) and Debian's bridge CNI, so that a
# pod runs its containers for real; the kwok pools stay for scale tests. Sourced by up.sh (after its
# helpers start, alive, kc, wait_until) and down.sh; `hack/cluster/node.sh import IMAGE...` loads locally
# built Docker images into the node (nothing pulls: no registry is reachable).
#
# It is labelled and tainted like one GKE TPU host of a single-host Spot pool (v6e 2x2, 4 chips), a shape
# no kwok pool and no other e2e test uses: only a pod that asks for v6e 2x2 *and* tolerates Spot
# (`spec.tpu.capacity.type: Spot`) can land on it. `google.com/tpu: 4` is advertised by a status patch of
# the node's capacity (no device plugin: there is no TPU), re-applied whenever up.sh finds it missing.
#
# Needed on these machines (cgroup v1, no CAP_SYS_RESOURCE): kubelet `failCgroupV1: false` and
# `cgroupDriver: cgroupfs`; containerd `restrict_oom_score_adj = true` (without it every sandbox fails).
# The sandbox ("pause") image is made here from Kubernetes' pause.c (build.sh) as a docker-archive tarball.
# The in-cluster address of the apiserver (the `kubernetes` Service, 10.0.0.1:443) is DNAT-ed to the
# loopback apiserver for pods on the node's bridge: the one rule kube-proxy would have made.

NODE_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/lib.sh
[[ -n "${RLJOB_BIN_CACHE:-}" ]] || source "${NODE_HERE}/lib.sh"

NODE_NAME="gke-rljob-real-v6e-2x2-0"
NODE_POOL="real-v6e-2x2"
NODE_CHIPS=4
NODE_DIR="${RLJOB_CLUSTER_DIR}/node"
# Images survive cluster restarts (importing the trainer image takes a minute): containerd's root is cached.
NODE_CONTAINERD_ROOT="${RLJOB_CACHE}/node/containerd"
NODE_SOCK="${NODE_DIR}/containerd.sock"
NODE_BRIDGE=rljob0
NODE_SUBNET="${RLJOB_NODE_SUBNET:-10.89.0.0/24}"
KUBELET_PORT="${RLJOB_KUBELET_PORT:-10250}"
KUBELET_HEALTHZ_PORT="${RLJOB_KUBELET_HEALTHZ_PORT:-10248}"
PAUSE_IMAGE="localhost/rljob-pause:${KUBERNETES_VERSION}"
NAT_COMMENT="rljob-node: kubernetes service to the loopback apiserver"

node_ctr() { ctr --address "${NODE_SOCK}" --namespace k8s.io "$@"; }

# The address the node registers (InternalIP) and serves the kubelet API on: the machine's source address
# for its default route. A host-network pod's IP is this address, which Prometheus scrapes.
node_ip() {
  if [[ -n "${RLJOB_NODE_IP:-}" ]]; then
    echo "${RLJOB_NODE_IP}"
    return
  fi
  ip -4 -o route get 1.0.0.0 2>/dev/null | sed -n -E 's/.* src ([0-9.]+).*/\1/p'
}

# node_packages -> install Debian's containerd, runc and CNI plugins when missing.
node_packages() {
  command -v containerd >/dev/null && command -v runc >/dev/null && [[ -x /usr/lib/cni/bridge ]] && return
  log "node: installing Debian's containerd, runc, containernetworking-plugins"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    containerd runc containernetworking-plugins >&2 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      containerd runc containernetworking-plugins >&2; }
}

node_containerd_config() {
  cat <<EOF
version = 2
root = "${NODE_CONTAINERD_ROOT}"
state = "${NODE_DIR}/containerd-state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "${NODE_SOCK}"
[plugins."io.containerd.internal.v1.opt"]
  path = "${NODE_CONTAINERD_ROOT}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  # No CAP_SYS_RESOURCE here: without this every sandbox fails to start.
  restrict_oom_score_adj = true
  # Network namespaces under our state dir (not /run/netns), so node_down's unmount sweep finds them.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${NODE_DIR}/cni"
EOF
}

node_cni_config() {
  cat <<EOF
{"cniVersion": "0.4.0", "name": "rljob", "plugins": [
  {"type": "bridge", "bridge": "${NODE_BRIDGE}", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "${NODE_SUBNET}"}]], "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": "${NODE_DIR}/cni-ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
}

node_kubelet_config() {
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://${NODE_SOCK}
address: $(node_ip)
port: ${KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${KUBELET_HEALTHZ_PORT}
# Only clients with a certificate of the cluster's CA (the apiserver, for logs/exec) reach the kubelet API.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: ${PKI_DIR}/ca.crt}
authorization: {mode: AlwaysAllow}
failSwapOn: false
registerWithTaints:
- {key: google.com/tpu, value: present, effect: NoSchedule}
- {key: cloud.google.com/gke-spot, value: "true", effect: NoSchedule}
# A shared CI disk: never evict for disk, never garbage-collect the imported images (nothing can re-pull).
evictionHard: {memory.available: 100Mi, nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
EOF
}

# node_pause_image -> import the sandbox image (a docker-archive tarball made from build.sh's static pause).
node_pause_image() {
  node_ctr images ls -q "name==${PAUSE_IMAGE}" 2>/dev/null | grep -q . && return
  local work layer cfg lsum csum
  work="$(mktemp -d)"
  mkdir -p "${work}/rootfs"
  cp "$(kubelet_dir)/pause" "${work}/rootfs/pause"
  tar -C "${work}/rootfs" --owner=0 --group=0 --mtime=@0 -cf "${work}/layer.tar" pause
  lsum="$(sha256sum "${work}/layer.tar" | cut -d' ' -f1)"
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "${lsum}" >"${work}/config.json"
  csum="$(sha256sum "${work}/config.json" | cut -d' ' -f1)"
  mkdir -p "${work}/img/${lsum}"
  mv "${work}/layer.tar" "${work}/img/${lsum}/layer.tar"
  mv "${work}/config.json" "${work}/img/${csum}.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "${csum}" "${PAUSE_IMAGE}" "${lsum}" \
    >"${work}/img/manifest.json"
  tar -C "${work}/img" -cf "${work}/pause.tar" .
  node_ctr images import "${work}/pause.tar" >&2
  rm -rf "${work}"
  log "node: sandbox image ${PAUSE_IMAGE} imported"
}

# node_import IMAGE... -> copy locally built Docker images into the node's containerd (k8s.io namespace),
# skipping an image whose Docker ID was imported already. Prints "IMAGE docker-id" per image.
node_import() {
  local image id stamp
  mkdir -p "${NODE_CONTAINERD_ROOT}/../imported"
  for image in "$@"; do
    id="$(docker image inspect -f '{{.Id}}' "${image}")" || die "node: image ${image} is not in Docker (hack/image.sh)"
    stamp="${NODE_CONTAINERD_ROOT}/../imported/$(tr '/:' '__' <<<"${image}")"
    if [[ "$(cat "${stamp}" 2>/dev/null)" != "${id}" ]] || ! node_ctr images ls -q "name==${image}" | grep -q .; then
      log "node: importing ${image} (${id})"
      # containerd 1.6 can garbage-collect a parent snapshot while an import unpacks onto it ("failed to
      # prepare extraction snapshot ... parent snapshot ... does not exist", containerd#3787, #10835): a
      # CI run met it on 2026-12-05 when a rebuilt image replaced the old one; the same import, run again,
      # went through. So: up to three tries.
      local try
      for try in 1 2 3; do
        docker save "${image}" | node_ctr images import - >&2 && break
        ((try < 3)) || die "node: importing ${image} failed 3 times"
        log "node: importing ${image} failed (try ${try}); again"
      done
      echo "${id}" >"${stamp}"
    fi
    echo "${image} ${id}"
  done
}

# node_capacity -> advertise the host's TPU chips (what the GKE TPU device plugin would), if missing.
node_capacity() {
  local have
  have="$(kc get node "${NODE_NAME}" -o jsonpath='{.status.capacity.google\.com/tpu}' 2>/dev/null)"
  [[ "${have}" == "${NODE_CHIPS}" ]] && return
  kc patch node "${NODE_NAME}" --subresource=status --type=merge \
    -p "{\"status\":{\"capacity\":{\"google.com/tpu\":\"${NODE_CHIPS}\"}}}" >&2
}

# The node is Ready and the kubelet has copied the TPU capacity into allocatable.
node_ready() {
  local ready alloc
  node_capacity || return 1
  ready="$(kc get node "${NODE_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')"
  alloc="$(kc get node "${NODE_NAME}" -o jsonpath='{.status.allocatable.google\.com/tpu}')"
  [[ "${ready}" == True && "${alloc}" == "${NODE_CHIPS}" ]]
}

# The DNAT of the `kubernetes` Service for pods on the bridge (made before the CNI needs it; the bridge
# plugin reuses an existing bridge). route_localnet on this bridge only lets the DNAT reach 127.0.0.1.
node_network() {
  local gw="${NODE_SUBNET%.*}.1/${NODE_SUBNET#*/}"
  ip link show "${NODE_BRIDGE}" >/dev/null 2>&1 || ip link add "${NODE_BRIDGE}" type bridge
  ip addr show dev "${NODE_BRIDGE}" | grep -q "inet ${gw}" || ip addr add "${gw}" dev "${NODE_BRIDGE}"
  ip link set "${NODE_BRIDGE}" up
  sysctl -qw "net.ipv4.conf.${NODE_BRIDGE}.route_localnet=1"
  local rule=(PREROUTING -i "${NODE_BRIDGE}" -d 10.0.0.1/32 -p tcp --dport 443
    -m comment --comment "${NAT_COMMENT}" -j DNAT --to-destination "127.0.0.1:${APISERVER_PORT}")
  iptables -t nat -C "${rule[@]}" 2>/dev/null || iptables -t nat -A "${rule[@]}"
}

# ensure_node -> start containerd and the kubelet unless they run (idempotent, like ensure_kueue).
ensure_node() {
  if alive containerd && alive kubelet; then
    wait_until 120 "real node ${NODE_NAME} Ready with google.com/tpu" node_ready
    return
  fi
  node_packages
  local ip
  ip="$(node_ip)"
  [[ -n "${ip}" ]] || die "node: no IPv4 source address for the default route; set RLJOB_NODE_IP"
  mkdir -p "${NODE_DIR}/cni" "${NODE_DIR}/kubelet" "${NODE_CONTAINERD_ROOT}"
  node_containerd_config >"${NODE_DIR}/containerd.toml"
  node_cni_config >"${NODE_DIR}/cni/10-rljob.conflist"
  node_kubelet_config >"${NODE_DIR}/kubelet.yaml"
  [[ -f "${PKI_DIR}/kubelet.crt" ]] || new_cert kubelet "/O=system:nodes/CN=system:node:${NODE_NAME}" clientAuth
  write_kubeconfig "${NODE_DIR}/kubelet.kubeconfig" kubelet
  # No Node authorizer here (RBAC only): the kubelet's rights are the system:node role's, bound to it.
  kc create clusterrolebinding rljob-real-node --clusterrole=system:node --user="system:node:${NODE_NAME}" \
    --dry-run=client -o yaml | kc apply -f - >&2
  node_network

  start containerd containerd --config "${NODE_DIR}/containerd.toml"
  wait_until 60 "node containerd" node_ctr version
  node_pause_image

  local labels="cloud.google.com/gke-nodepool=${NODE_POOL},cloud.google.com/gke-tpu-accelerator=tpu-v6e-slice"
  labels+=",cloud.google.com/gke-tpu-topology=2x2,node.kubernetes.io/instance-type=ct6e-standard-4t"
  labels+=",cloud.google.com/gke-spot=true,type=real"
  start kubelet "$(kubelet_dir)/kubelet" --config="${NODE_DIR}/kubelet.yaml" \
    --kubeconfig="${NODE_DIR}/kubelet.kubeconfig" --root-dir="${NODE_DIR}/kubelet" \
    --hostname-override="${NODE_NAME}" --node-ip="${ip}" --node-labels="${labels}"
  wait_until 180 "real node ${NODE_NAME} Ready with google.com/tpu" node_ready
}

# node_down -> stop the kubelet, kill every pod container, stop containerd, undo the mounts and the NAT
# rule. Called by down.sh before it stops the rest (the containers outlive containerd otherwise).
node_down() {
  local pid i
  if pid="$(cat "${PID_DIR}/kubelet.pid" 2>/dev/null)" && kill -TERM "${pid}" 2>/dev/null; then
    for ((i = 0; i < 100; i++)); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.1
    done
  fi
  if [[ -S "${NODE_SOCK}" ]]; then
    local t
    for t in $(node_ctr tasks ls -q 2>/dev/null); do
      node_ctr tasks kill -s SIGKILL "${t}" >/dev/null 2>&1 || true
    done
    sleep 1
    for t in $(node_ctr tasks ls -q 2>/dev/null); do
      node_ctr tasks delete -f "${t}" >/dev/null 2>&1 || true
    done
  fi
  pid="$(cat "${PID_DIR}/containerd.pid" 2>/dev/null)" && kill -TERM "${pid}" 2>/dev/null
  sleep 1
  # Pod volumes (tmpfs), sandbox /dev/shm and container rootfs mounts under the node's folder.
  awk -v d="${NODE_DIR}/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l || true
  iptables -t nat -S PREROUTING 2>/dev/null | grep -F -- "${NAT_COMMENT}" | sed 's/^-A/-D/' |
    while read -r line; do eval "iptables -t nat ${line}"; done || true
  # The bridge plugin's masquerade rules of sandboxes killed above (no CNI DEL ran for them).
  local chains
  chains="$(iptables -t nat -S POSTROUTING 2>/dev/null | grep -F 'name: \"rljob\"' | grep -o 'CNI-[0-9a-f]*' | sort -u)" || true
  iptables -t nat -S POSTROUTING 2>/dev/null | grep -F 'name: \"rljob\"' | sed 's/^-A/-D/' |
    while read -r line; do eval "iptables -t nat ${line}"; done || true
  for t in ${chains}; do
    iptables -t nat -F "${t}" 2>/dev/null && iptables -t nat -X "${t}" 2>/dev/null || true
  done
  ip link del "${NODE_BRIDGE}" 2>/dev/null || true
}

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
  set -euo pipefail
  case "${1:-}" in
    import)
      shift
      node_import "$@"
      ;;
    *)
      echo "usage: hack/cluster/node.sh import IMAGE..." >&2
      exit 2
      ;;
  esac
fi
