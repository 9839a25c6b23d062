#!/usr/bin/env bash
# Stop the simulated cluster started by up.sh and delete its state, keeping the
# logs ($RLJOB_CLUSTER_DIR/logs) for post-mortems. Safe to run when nothing runs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/lib.sh
source "${HERE}/lib.sh"
# shellcheck source=SCRIPTDIR/node.sh
source "${HERE}/node.sh"
lock_cluster

# stop NAME -> SIGTERM the recorded pid, SIGKILL after 10 s. Only if the pid still
# belongs to a process of that binary: a pid file from a crashed run may name a
# pid that the kernel has since reused for something else.
stop() {
  local name="$1" pid bin i
  pid="$(cat "${PID_DIR}/${name}.pid" 2>/dev/null)" || return 0
  bin="${name%-controller}"   # jobset-controller runs the `jobset` binary
  if ! tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -q "${bin}"; then
    rm -f "${PID_DIR}/${name}.pid"
    return 0
  fi
  kill -TERM "${pid}" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "${pid}" 2>/dev/null; then
    log "${name} (pid ${pid}) ignored SIGTERM; killing"
    kill -KILL "${pid}" 2>/dev/null || true
  fi
  rm -f "${PID_DIR}/${name}.pid"
  log "stopped ${name}"
}

# The real node first: its pod containers would outlive containerd, its mounts block the rm below.
node_down

if [[ -f "${PID_DIR}/order" ]]; then
  # Clients of the apiserver (kwok, controllers, anything else recorded) first and
  # in parallel (each takes a few seconds to shut down), then the apiserver, etcd last.
  while read -r name; do
    [[ "${name}" == kube-apiserver || "${name}" == etcd ]] || stop "${name}" &
  done <"${PID_DIR}/order"
  wait
  stop kube-apiserver
  stop etcd
fi

if [[ -d "${RLJOB_CLUSTER_DIR}" ]]; then
  find "${RLJOB_CLUSTER_DIR}" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
fi
