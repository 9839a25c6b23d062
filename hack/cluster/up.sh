#!/usr/bin/env bash
# Start the simulated GKE TPU cluster on 127.0.0.1 and print the KUBECONFIG to use.
#
#   etcd -> kube-apiserver (RBAC, PodSecurity) -> kube-controller-manager, kube-scheduler
#   -> JobSet CRD + controller (webhooks registered by URL) -> Kueue (kueue.sh) -> kwok + fake TPU nodes
#   -> one real node: containerd + kubelet + bridge CNI (node.sh)
#
# Idempotent: if a cluster is already running from $RLJOB_CLUSTER_DIR and healthy,
# attach to it (add Kueue if it is not running yet, check readiness, print the KUBECONFIG). Otherwise stop whatever is
# left of an earlier one and start fresh. Builds missing binaries first (cached).
#
# Env: RLJOB_CLUSTER_DIR (default /tmp/rljob-cluster), ports in lib.sh.
# Stdout gets exactly one line, `export KUBECONFIG=...`, so `eval "$(up.sh)"` works;
# progress goes to stderr, component logs to $RLJOB_CLUSTER_DIR/logs/.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/lib.sh
source "${HERE}/lib.sh"
# shellcheck source=SCRIPTDIR/pki.sh
source "${HERE}/pki.sh"
# shellcheck source=SCRIPTDIR/kueue.sh
source "${HERE}/kueue.sh"
# shellcheck source=SCRIPTDIR/node.sh
source "${HERE}/node.sh"

lock_cluster
"${HERE}/build.sh" >&2
PATH="$(cluster_path)"
export PATH

# wait_until SECONDS WHAT CMD... -> retry CMD every 0.5 s until it succeeds.
wait_until() {
  local timeout="$1" what="$2"
  shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for ${what}; last attempt said:"
      "$@" >&2 || true
      log "logs are in ${LOG_DIR}"
      exit 1
    fi
    sleep 0.5
  done
  log "ready: ${what}"
}

# start NAME CMD... -> run CMD detached (own session, so the caller's Ctrl-C or
# process-group kill does not take the cluster down), log and pid under the cluster dir.
start() {
  local name="$1"
  shift
  # 9>&-: do not hand the cluster lock (lib.sh lock_cluster) to a long-lived process.
  setsid "$@" >"${LOG_DIR}/${name}.log" 2>&1 </dev/null 9>&- &
  echo "$!" >"${PID_DIR}/${name}.pid"
  # Record start order so down.sh stops in reverse.
  echo "${name}" >>"${PID_DIR}/order"
  log "started ${name} (pid $!)"
}

kc() { kubectl --kubeconfig "${PKI_DIR}/admin.kubeconfig" "$@"; }

# alive NAME -> the process recorded for NAME is still running.
alive() {
  local pid
  pid="$(cat "${PID_DIR}/$1.pid" 2>/dev/null)" || return 1
  kill -0 "${pid}" 2>/dev/null
}

all_alive() {
  local name
  [[ -f "${PID_DIR}/order" ]] || return 1
  while read -r name; do
    alive "${name}" || return 1
  done <"${PID_DIR}/order"
}

# A minimal JobSet: creating it with a server-side dry run goes through both
# JobSet webhooks, so success means the webhooks are registered and answering.
probe_jobset() {
  kc create --dry-run=server -o jsonpath='{.spec.startupPolicy.startupPolicyOrder}' -f - <<'EOF'
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: readiness-probe, namespace: default}
spec:
  replicatedJobs:
  - name: w
    template:
      spec:
        template:
          spec:
            containers: [{name: c, image: busybox}]
EOF
}

# All kwok nodes of nodepools.txt exist and are Ready (kwok has initialized them).
nodes_ready() {
  local want statuses
  want="$("${HERE}/nodes.sh" | grep -c '^kind: Node$')"
  statuses="$(kc get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}')"
  [[ "$(grep -c '^True$' <<<"${statuses}")" -eq "${want}" ]]
}

# Everything a test needs before it can create workloads.
wait_ready() {
  wait_until 60 "kube-apiserver /readyz" kc get --raw /readyz
  wait_until 60 "JobSet CRD established" kc wait --for=condition=Established --timeout=5s \
    crd/jobsets.jobset.x-k8s.io
  wait_until 90 "JobSet webhooks (server-side dry-run create)" probe_jobset
  wait_until 90 "ServiceAccount default/default" kc get serviceaccount default -n default
  wait_until 90 "fake nodes Ready" nodes_ready
  wait_until 180 "real node ${NODE_NAME} Ready with google.com/tpu" node_ready
}

finish() {
  cp "${PKI_DIR}/admin.kubeconfig" "${ADMIN_KUBECONFIG}"
  log "cluster is up; logs in ${LOG_DIR}; stop it with hack/cluster/down.sh"
  echo "export KUBECONFIG=${ADMIN_KUBECONFIG}"
}

main() {
  # --- attach ------------------------------------------------------------------
  if all_alive && kc get --raw /readyz >/dev/null 2>&1; then
    log "attaching to the cluster running from ${RLJOB_CLUSTER_DIR}"
    ensure_kueue
    ensure_node
    wait_ready
    finish
    return
  fi

  # --- fresh start -------------------------------------------------------------
  "${HERE}/down.sh" >&2
  rm -rf "${RLJOB_CLUSTER_DIR}"
  mkdir -p "${LOG_DIR}" "${PID_DIR}" "${RLJOB_CLUSTER_DIR}/etcd"
  t0=${SECONDS}
  make_pki

  # etcd: single member on loopback. No fsync: the data is throwaway and fsync on a
  # shared CI disk is what makes etcd (and so the apiserver) slow.
  start etcd etcd --name=default --data-dir="${RLJOB_CLUSTER_DIR}/etcd" \
    --listen-client-urls="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
    --advertise-client-urls="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
    --listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster="default=http://127.0.0.1:${ETCD_PEER_PORT}" \
    --unsafe-no-fsync --listen-metrics-urls=""
  wait_until 60 "etcd" curl -fsS "http://127.0.0.1:${ETCD_CLIENT_PORT}/health"

  # kube-apiserver. --advertise-address is required without a routable interface;
  # --endpoint-reconciler-type=none because loopback endpoints are rejected.
  # PodSecurity is in the default admission plugins; named here to make it explicit.
  start kube-apiserver kube-apiserver \
    --etcd-servers="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="${APISERVER_PORT}" \
    --tls-cert-file="${PKI_DIR}/apiserver.crt" --tls-private-key-file="${PKI_DIR}/apiserver.key" \
    --client-ca-file="${PKI_DIR}/ca.crt" \
    --authorization-mode=RBAC --enable-admission-plugins=PodSecurity \
    --allow-privileged=true \
    --service-cluster-ip-range=10.0.0.0/24 --endpoint-reconciler-type=none \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="${PKI_DIR}/sa.pub" \
    --service-account-signing-key-file="${PKI_DIR}/sa.key" \
    --cert-dir="${PKI_DIR}/apiserver-certs" \
    --kubelet-client-certificate="${PKI_DIR}/apiserver-kubelet-client.crt" \
    --kubelet-client-key="${PKI_DIR}/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP
  wait_until 120 "kube-apiserver /readyz" kc get --raw /readyz

  # kube-controller-manager: Job, garbage collector, namespace, ServiceAccount (+token)
  # controllers among others. Each controller uses its own ServiceAccount, so the
  # default RBAC policy's per-controller roles apply as on a real cluster.
  start kube-controller-manager kube-controller-manager \
    --kubeconfig="${PKI_DIR}/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="${PKI_DIR}/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="${PKI_DIR}/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="${KCM_PORT}" --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="${PKI_DIR}/sa.key" --root-ca-file="${PKI_DIR}/ca.crt" \
    --service-cluster-ip-range=10.0.0.0/24

  start kube-scheduler kube-scheduler \
    --kubeconfig="${PKI_DIR}/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="${PKI_DIR}/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="${PKI_DIR}/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="${SCHEDULER_PORT}" --leader-elect=false

  # JobSet: CRD (800 kB: too big for a client-side apply annotation, so server-side)
  # and JobSet's own ClusterRole, bound to the controller's user.
  jobset_manifests="$(jobset_dir)/manifests"
  kc apply --server-side -f "${jobset_manifests}/jobset.x-k8s.io_jobsets.yaml" >&2
  sed 's/name: manager-role/name: jobset-manager-role/' "${jobset_manifests}/role.yaml" | kc apply -f - >&2
  kc create clusterrolebinding jobset-manager --clusterrole=jobset-manager-role --user=jobset-controller \
    --dry-run=client -o yaml | kc apply -f - >&2
  wait_until 60 "JobSet CRD established" kc wait --for=condition=Established --timeout=5s \
    crd/jobsets.jobset.x-k8s.io

  # Internal cert management off: we made the webhook's serving cert and register the
  # webhooks ourselves, by URL, the way envtest does.
  cat >"${RLJOB_CLUSTER_DIR}/jobset-config.yaml" <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {host: 127.0.0.1, port: ${JOBSET_WEBHOOK_PORT}, certDir: ${PKI_DIR}/webhook-certs}
health: {healthProbeBindAddress: "127.0.0.1:${JOBSET_HEALTH_PORT}"}
metrics: {bindAddress: "0"}
EOF
  start jobset-controller jobset --config="${RLJOB_CLUSTER_DIR}/jobset-config.yaml" \
    --kubeconfig="${PKI_DIR}/jobset-controller.kubeconfig" --metrics-bind-address=0
  "${HERE}/webhooks.sh" "https://127.0.0.1:${JOBSET_WEBHOOK_PORT}" "${PKI_DIR}/ca.crt" | kc apply -f - >&2
  wait_until 90 "jobset-controller /readyz" curl -fsS "http://127.0.0.1:${JOBSET_HEALTH_PORT}/readyz"

  ensure_kueue

  # kwok plays the kubelet of every node annotated kwok.x-k8s.io/node=fake, driven by
  # our stages (hack/cluster/stages/). No node leases: the heartbeat stage keeps nodes Ready.
  stage_flags=()
  for f in "${HERE}"/stages/*.yaml; do
    stage_flags+=("--config=${f}")
  done
  start kwok kwok --kubeconfig="${PKI_DIR}/kwok-controller.kubeconfig" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --server-address="127.0.0.1:${KWOK_PORT}" --cidr=10.244.0.1/16 --node-ip=10.128.0.1 \
    "${stage_flags[@]}"
  "${HERE}/nodes.sh" | kc apply -f - >&2
  ensure_node

  wait_ready
  log "fresh start took $((SECONDS - t0))s"
  finish
}

# Called last, so bash has parsed the whole file before running anything.
main "$@"
