#!/usr/bin/env bash
# Kueue in the simulated cluster: CRDs, RBAC, controller-manager (webhooks registered by URL, like
# JobSet's), and one ResourceFlavor per fake TPU node pool. Sourced by up.sh after its helpers
# (start, alive, kc, wait_until); `ensure_kueue` is idempotent, so up.sh calls it both on a fresh start
# and when it attaches to a cluster that was started before Kueue was part of it.
#
# Kueue manages only JobSets that carry kueue.x-k8s.io/queue-name (manageJobsWithoutQueueName: false),
# and its JobSet webhooks only see such JobSets (objectSelector), so a stopped Kueue never blocks the
# unqueued JobSets other suites create. ClusterQueues and LocalQueues are per test: each test sizes its
# own quota.
#
# Usage (printing only): hack/cluster/kueue.sh flavors [nodepools.txt...] | kubectl apply -f -

KUEUE_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUEUE_METRICS_CERTS=/etc/kueue/metrics/certs

# kueue_webhooks URL CA_FILE -> Kueue's webhook configurations for the objects we use: its own API
# (kueue.x-k8s.io v1beta2) and JobSets. Names, paths and rules as in Kueue v0.17.0's
# config/components/webhook/manifests.yaml; the other integrations are off, so their hooks are left out.
kueue_webhooks() {
  local url="$1" ca
  ca="$(base64 -w0 <"$2")"
  hook() { # NAME PATH GROUP VERSION RESOURCES OPERATIONS
    cat <<YAML
- name: $1
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig: {url: "${url}$2", caBundle: ${ca}}
  rules:
  - {apiGroups: [$3], apiVersions: [$4], resources: [$5], operations: [$6]}
YAML
    if [[ "$3" == jobset.x-k8s.io ]]; then
      echo "  objectSelector: {matchExpressions: [{key: kueue.x-k8s.io/queue-name, operator: Exists}]}"
    fi
  }
  local k=kueue.x-k8s.io v=v1beta2
  cat <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: kueue-mutating-webhook-configuration}
webhooks:
$(hook mclusterqueue.kb.io /mutate-kueue-x-k8s-io-v1beta2-clusterqueue "${k}" "${v}" clusterqueues CREATE)
$(hook mresourceflavor.kb.io /mutate-kueue-x-k8s-io-v1beta2-resourceflavor "${k}" "${v}" resourceflavors CREATE)
$(hook mworkload.kb.io /mutate-kueue-x-k8s-io-v1beta2-workload "${k}" "${v}" workloads CREATE)
$(hook mjobset.kb.io /mutate-jobset-x-k8s-io-v1alpha2-jobset jobset.x-k8s.io v1alpha2 jobsets CREATE)
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: kueue-validating-webhook-configuration}
webhooks:
$(hook vclusterqueue.kb.io /validate-kueue-x-k8s-io-v1beta2-clusterqueue "${k}" "${v}" clusterqueues "CREATE, UPDATE")
$(hook vcohort.kb.io /validate-kueue-x-k8s-io-v1beta2-cohort "${k}" "${v}" cohorts "CREATE, UPDATE")
$(hook vresourceflavor.kb.io /validate-kueue-x-k8s-io-v1beta2-resourceflavor "${k}" "${v}" resourceflavors "CREATE, UPDATE")
$(hook vworkload.kb.io /validate-kueue-x-k8s-io-v1beta2-workload "${k}" "${v}" "workloads, workloads/status" "CREATE, UPDATE")
$(hook vjobset.kb.io /validate-jobset-x-k8s-io-v1alpha2-jobset jobset.x-k8s.io v1alpha2 jobsets "CREATE, UPDATE")
YAML
}

# kueue_flavors [FILE...] -> one ResourceFlavor per TPU pool of the node pool tables (default: both
# nodepools*.txt), named after the pool, whose nodeLabels are the labels nodes.sh gives that pool's
# nodes (pool, accelerator, topology and the capacity type's). Kueue copies them into the pods'
# nodeSelector on admission, so an admitted slice lands on the pool its quota came from.
kueue_flavors() {
  local files=("$@")
  ((${#files[@]})) || files=("${KUEUE_HERE}/nodepools.txt" "${KUEUE_HERE}/nodepools-capacity.txt")
  local pool accel topo _machine _hosts _chips capacity
  cat "${files[@]}" | while read -r pool accel topo _machine _hosts _chips capacity; do
    [[ -z "${pool}" || "${pool}" == \#* || "${accel}" == "-" ]] && continue
    cat <<YAML
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: ${pool}}
spec:
  nodeLabels:
    cloud.google.com/gke-nodepool: ${pool}
    cloud.google.com/gke-tpu-accelerator: ${accel}
    cloud.google.com/gke-tpu-topology: ${topo}
YAML
    case "${capacity:-}" in
      spot) echo '    cloud.google.com/gke-spot: "true"' ;;
      flex-start) echo '    cloud.google.com/gke-flex-start: "true"' ;;
      reservation=*) echo "    cloud.google.com/reservation-name: ${capacity#reservation=}" ;;
    esac
  done
}

# kueue_ready -> Kueue's webhooks answer: a server-side dry run of a ResourceFlavor goes through both
# of its ResourceFlavor webhooks.
kueue_ready() {
  kc create --dry-run=server -f - <<'EOF'
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: readiness-probe}
EOF
}

# ensure_kueue -> when the Kueue controller is not running: CRDs, RBAC, config, controller, webhooks and
# flavors (every apply idempotent); then, always, wait until Kueue and its webhooks answer.
ensure_kueue() {
  local dir cfg="${RLJOB_CLUSTER_DIR}/kueue-config.yaml"
  dir="$(kueue_dir)/manifests"
  if ! alive kueue-controller; then
    log "kueue: installing (CRDs, RBAC, controller-manager, webhooks)"
    # A cluster started before Kueue was added has no client cert for it yet.
    if [[ ! -f "${PKI_DIR}/kueue-controller.kubeconfig" ]]; then
      new_cert kueue-controller "/CN=kueue-controller" clientAuth
      write_kubeconfig "${PKI_DIR}/kueue-controller.kubeconfig" kueue-controller
    fi
    # Kueue's ClusterRole, and its Role on Secrets in its own namespace
    # (config/components/rbac/manager_secrets_role.yaml: it watches them there).
    kc create namespace kueue-system --dry-run=client -o yaml | kc apply -f - >/dev/null
    sed 's/name: manager-role/name: kueue-manager-role/' "${dir}/role.yaml" | kc apply -f - >/dev/null
    kc create clusterrolebinding kueue-manager --clusterrole=kueue-manager-role --user=kueue-controller \
      --dry-run=client -o yaml | kc apply -f - >/dev/null
    kc create role kueue-manager-secrets -n kueue-system --resource=secrets --verb=get,list,watch,update \
      --dry-run=client -o yaml | kc apply -f - >/dev/null
    kc create rolebinding kueue-manager-secrets -n kueue-system --role=kueue-manager-secrets \
      --user=kueue-controller --dry-run=client -o yaml | kc apply -f - >/dev/null
    # Server-side: the Workload CRD is too big for the client-side apply annotation.
    kc apply --server-side --force-conflicts -f "${dir}/crds/" >&2
    wait_until 60 "Kueue CRDs established" kc wait --for=condition=Established --timeout=5s \
      crd/workloads.kueue.x-k8s.io crd/clusterqueues.kueue.x-k8s.io crd/localqueues.kueue.x-k8s.io \
      crd/resourceflavors.kueue.x-k8s.io
    # Same serving cert as JobSet's webhook (127.0.0.1), another port. The visibility API server
    # would need an APIService registration; nothing here uses it.
    cat >"${cfg}" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
manageJobsWithoutQueueName: false
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {host: 127.0.0.1, port: ${KUEUE_WEBHOOK_PORT}, certDir: ${PKI_DIR}/webhook-certs}
health: {healthProbeBindAddress: "127.0.0.1:${KUEUE_HEALTH_PORT}"}
metrics: {bindAddress: "0"}
featureGates: {VisibilityOnDemand: false}
integrations:
  frameworks: [jobset.x-k8s.io/jobset]
EOF
    # With internal cert management off, Kueue v0.17.0 loads a metrics serving cert from this fixed path
    # at startup (cmd/kueue/main.go) even with metrics off, and exits without it. Its Deployment mounts a
    # Secret there; we put a copy of our webhook serving cert (nothing is served with it: metrics are off).
    if [[ ! -f "${KUEUE_METRICS_CERTS}/tls.crt" ]]; then
      mkdir -p "${KUEUE_METRICS_CERTS}" ||
        die "Kueue needs ${KUEUE_METRICS_CERTS} (a fixed path in Kueue); create it writable for this user"
      cp "${PKI_DIR}/webhook-certs/tls.crt" "${PKI_DIR}/webhook-certs/tls.key" "${KUEUE_METRICS_CERTS}/"
    fi
    start kueue-controller kueue --config="${cfg}" --kubeconfig="${PKI_DIR}/kueue-controller.kubeconfig"
    kueue_webhooks "https://127.0.0.1:${KUEUE_WEBHOOK_PORT}" "${PKI_DIR}/ca.crt" | kc apply -f - >&2
    wait_until 90 "Kueue webhooks (server-side dry-run create)" kueue_ready
    kueue_flavors | kc apply -f - >&2
  fi
  wait_until 90 "kueue-controller /readyz" curl -fsS "http://127.0.0.1:${KUEUE_HEALTH_PORT}/readyz"
  wait_until 90 "Kueue webhooks (server-side dry-run create)" kueue_ready
}

if [[ "${BASH_SOURCE[0]}" == "$0" && "${1:-}" == flavors ]]; then
  shift
  kueue_flavors "$@"
fi
