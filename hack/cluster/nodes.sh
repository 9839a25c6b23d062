#!/usr/bin/env bash
# Print the kwok Node manifests (YAML stream) for every pool in nodepools.txt.
# Usage: hack/cluster/nodes.sh [nodepools.txt] | kubectl apply -f -
# An optional 7th column, capacity (spot, flex-start, reservation=<name>), adds GKE's labels and taints
# for that capacity type (nodepools-capacity.txt).
#
# The nodes carry the labels GKE puts on TPU nodes (see
# ../shared/reference/gke-tpu-jobset.md), so that nodeSelectors, tolerations and
# JobSet's exclusive placement (by cloud.google.com/gke-nodepool) behave as on GKE.
# The annotation kwok.x-k8s.io/node=fake is what kwok selects the nodes it manages by.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POOLS="${1:-${HERE}/nodepools.txt}"

# Generous cpu/memory/pods so that only TPU chips, selectors and taints limit placement.
CPU=200
MEMORY=800Gi
PODS=110

# Extra labels (indented for the labels map) and taints of a capacity type, as GKE sets them.
capacity_labels() {
  case "$1" in
    spot) echo "    cloud.google.com/gke-spot: \"true\"" ;;
    flex-start) echo "    cloud.google.com/gke-flex-start: \"true\"" ;;
    reservation=*)
      echo "    cloud.google.com/reservation-name: ${1#reservation=}"
      echo "    cloud.google.com/reservation-affinity: specific" ;;
  esac
}
capacity_taints() {
  case "$1" in
    spot) printf '  - key: cloud.google.com/gke-spot\n    value: "true"\n    effect: NoSchedule\n' ;;
    flex-start) printf '  - key: cloud.google.com/gke-flex-start\n    value: "true"\n    effect: NoSchedule\n' ;;
  esac
}

while read -r pool accel topo machine hosts chips capacity; do
  [[ -z "${pool}" || "${pool}" == \#* ]] && continue
  if [[ "${accel}" != "-" ]]; then
    # A typo in the table would silently make a pool that no real slice matches.
    product=$((${topo//x/*}))
    ((product == hosts * chips)) ||
      { echo "nodes.sh: pool ${pool}: topology ${topo} has ${product} chips, not ${hosts}x${chips}" >&2; exit 1; }
  fi
  for ((i = 0; i < hosts; i++)); do
    name="gke-rljob-${pool}-${i}"
    cat <<YAML
---
apiVersion: v1
kind: Node
metadata:
  name: ${name}
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: ${name}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
    node.kubernetes.io/instance-type: ${machine}
    cloud.google.com/gke-nodepool: ${pool}
YAML
    if [[ "${accel}" != "-" ]]; then
      cat <<YAML
    cloud.google.com/gke-tpu-accelerator: ${accel}
    cloud.google.com/gke-tpu-topology: ${topo}
$(capacity_labels "${capacity:-}")
spec:
  taints:
  - key: google.com/tpu
    value: present
    effect: NoSchedule
$(capacity_taints "${capacity:-}")
status:
  capacity: {cpu: "${CPU}", memory: ${MEMORY}, pods: "${PODS}", google.com/tpu: "${chips}"}
  allocatable: {cpu: "${CPU}", memory: ${MEMORY}, pods: "${PODS}", google.com/tpu: "${chips}"}
YAML
    else
      cat <<YAML
status:
  capacity: {cpu: "${CPU}", memory: ${MEMORY}, pods: "${PODS}"}
  allocatable: {cpu: "${CPU}", memory: ${MEMORY}, pods: "${PODS}"}
YAML
    fi
  done
done <"${POOLS}"
