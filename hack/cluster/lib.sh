#!/usr/bin/env bash
# Shared settings and helpers for hack/cluster/*.sh. Sourced, not executed.
# shellcheck disable=SC2034  # variables here are used by the sourcing scripts

LIB_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/versions.env
source "${LIB_HERE}/versions.env"

# Go is at /usr/local/go/bin on the CI image; it may not be on PATH.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  PATH="${PATH}:/usr/local/go/bin"
fi

RLJOB_CACHE="${XDG_CACHE_HOME:-${HOME}/.cache}/rljob"
RLJOB_BIN_CACHE="${RLJOB_CACHE}/bin"
# Wrapper modules (go.mod/go.sum) live here; the Go module and build caches stay Go's own.
RLJOB_SRC_CACHE="${RLJOB_CACHE}/src"
RLJOB_CLUSTER_DIR="${RLJOB_CLUSTER_DIR:-/tmp/rljob-cluster}"

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

need_go() {
  command -v go >/dev/null 2>&1 || die "go not found (expected /usr/local/go/bin/go)"
}

# json_field NAME < json -> value of the first top-level string field NAME
# (enough for `go mod download -json`, which prints one field per line).
json_field() {
  sed -n -E "s/^[[:space:]]*\"$1\": \"(.*)\",?\$/\1/p" | head -n1
}

kube_dir() { echo "${RLJOB_BIN_CACHE}/kubernetes-${KUBERNETES_VERSION}"; }
kubelet_dir() { echo "${RLJOB_BIN_CACHE}/kubelet-${KUBERNETES_VERSION}"; }
etcd_dir() { echo "${RLJOB_BIN_CACHE}/etcd-${ETCD_VERSION}"; }
jobset_dir() { echo "${RLJOB_BIN_CACHE}/jobset-${JOBSET_VERSION}"; }
kueue_dir() { echo "${RLJOB_BIN_CACHE}/kueue-${KUEUE_VERSION}"; }
kwok_dir() { echo "${RLJOB_BIN_CACHE}/kwok-${KWOK_VERSION}"; }
helm_dir() { echo "${RLJOB_BIN_CACHE}/helm-${HELM_VERSION}"; }
fake_gcs_dir() { echo "${RLJOB_BIN_CACHE}/fake-gcs-server-${FAKE_GCS_SERVER_VERSION}"; }
# newest_dir NAME: the newest cached NAME-<version> folder. promtool and the
# prometheus server (alert e2e tests) come from one Debian package whose version
# is whatever Debian resolved, so they are found, not named.
newest_dir() {
  local d
  d="$(find "${RLJOB_BIN_CACHE}" -maxdepth 1 -type d -name "$1-*" ! -name '*.tmp' 2>/dev/null |
    sort -V | tail -n1)"
  [[ -n "${d}" ]] || return 1
  echo "${d}"
}
promtool_dir() { newest_dir promtool; }
prometheus_dir() { newest_dir prometheus; }

# All bin folders, one per line (for PATH).
bin_dirs() {
  kube_dir
  etcd_dir
  jobset_dir
  kueue_dir
  kwok_dir
  helm_dir
  fake_gcs_dir
  promtool_dir || true
  prometheus_dir || true
}

# PATH with every cached bin folder in front.
cluster_path() {
  local p="" d
  while read -r d; do
    [[ -n "${d}" ]] && p+="${d}:"
  done < <(bin_dirs)
  echo "${p}${PATH}"
}

# lock_cluster -> hold an exclusive lock on the cluster dir until this script exits,
# so two `up.sh`/`down.sh` (e.g. two pytest sessions) do not start or stop it at once.
# The lock file sits next to the dir because up.sh/down.sh delete the dir itself.
lock_cluster() {
  [[ -n "${RLJOB_CLUSTER_LOCKED:-}" ]] && return   # our caller holds it already
  mkdir -p "$(dirname "${RLJOB_CLUSTER_DIR}")"
  exec 9>"${RLJOB_CLUSTER_DIR}.lock"
  flock 9
  export RLJOB_CLUSTER_LOCKED=1
}

# Cluster state layout.
PKI_DIR="${RLJOB_CLUSTER_DIR}/pki"
LOG_DIR="${RLJOB_CLUSTER_DIR}/logs"
PID_DIR="${RLJOB_CLUSTER_DIR}/pids"
ADMIN_KUBECONFIG="${RLJOB_CLUSTER_DIR}/kubeconfig"

# Loopback ports. Overridable so two clusters can coexist on one machine.
ETCD_CLIENT_PORT="${RLJOB_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${RLJOB_ETCD_PEER_PORT:-23800}"
APISERVER_PORT="${RLJOB_APISERVER_PORT:-16443}"
JOBSET_WEBHOOK_PORT="${RLJOB_JOBSET_WEBHOOK_PORT:-19443}"
JOBSET_HEALTH_PORT="${RLJOB_JOBSET_HEALTH_PORT:-18081}"
KUEUE_WEBHOOK_PORT="${RLJOB_KUEUE_WEBHOOK_PORT:-19444}"
KUEUE_HEALTH_PORT="${RLJOB_KUEUE_HEALTH_PORT:-18082}"
KWOK_PORT="${RLJOB_KWOK_PORT:-10247}"
KCM_PORT="${RLJOB_KCM_PORT:-10257}"
SCHEDULER_PORT="${RLJOB_SCHEDULER_PORT:-10259}"
