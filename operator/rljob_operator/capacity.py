"""TPU capacity (``spec.tpu.capacity``) as the node selectors and tolerations GKE documents for each type.

* OnDemand: nothing extra.
* Spot: ``cloud.google.com/gke-spot: "true"`` (the selector keeps the pods on Spot nodes) and a toleration
  of ``cloud.google.com/gke-spot=true:NoSchedule``, the taint GKE's Spot page advises for Spot pools and
  node auto-provisioning adds (https://cloud.google.com/kubernetes-engine/docs/how-to/spot-vms).
* Reservation: ``cloud.google.com/reservation-name`` and ``cloud.google.com/reservation-affinity:
  specific`` (plus ``cloud.google.com/reservation-project`` for a shared reservation)
  (https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations).
* FlexStart: ``cloud.google.com/gke-flex-start: "true"`` (plus ``cloud.google.com/gke-max-run-duration-
  seconds`` when set) and a toleration of ``cloud.google.com/gke-flex-start=true:NoSchedule``
  (https://cloud.google.com/kubernetes-engine/docs/how-to/dws-flex-start-training-tpu). A toleration of a
  taint a pool does not carry changes nothing.

Selectors are scheduling fields Kueue may extend while the JobSet is suspended (a ResourceFlavor's node
labels); the operator writes them once at creation and never re-applies them.
"""

from __future__ import annotations

from typing import Any

from rljob.api.pod import CapacitySpec
from rljob_operator import names


def capacity_selector(capacity: CapacitySpec) -> dict[str, str]:
    """Node labels the slice's nodes must carry for this capacity type."""
    if capacity.type == "Spot":
        return {names.SPOT_LABEL: "true"}
    if capacity.type == "Reservation":
        selector = {
            names.RESERVATION_NAME_LABEL: str(capacity.reservation),
            names.RESERVATION_AFFINITY_LABEL: "specific",
        }
        if capacity.reservationProject:
            selector[names.RESERVATION_PROJECT_LABEL] = capacity.reservationProject
        return selector
    if capacity.type == "FlexStart":
        selector = {names.FLEX_START_LABEL: "true"}
        if capacity.maxRunDurationSeconds is not None:
            selector[names.MAX_RUN_DURATION_LABEL] = str(capacity.maxRunDurationSeconds)
        return selector
    return {}


def capacity_tolerations(capacity: CapacitySpec) -> list[dict[str, Any]]:
    """Tolerations of the taint GKE puts on node pools of this capacity type (none for on-demand or a
    reservation: those nodes carry only the TPU taint)."""
    label = {"Spot": names.SPOT_LABEL, "FlexStart": names.FLEX_START_LABEL}.get(capacity.type)
    if label is None:
        return []
    return [{"key": label, "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
