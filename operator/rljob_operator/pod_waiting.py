"""A trainer pod whose container cannot start, as the ``ContainersWaiting`` condition on its RLJob.

Without it an RLJob whose image is not on the node (or cannot be pulled, or whose container the runtime
refuses to create) only says Pending with ``0/1 slices ready``, for ever: the reason is in the kubelet's
container status, which a user of ``kubectl get rlj`` never sees. The pod watcher sets the condition from
that status (the kubelet's own reason and message); :mod:`rljob_operator.status` clears it once every
slice is ready or the RLJob has finished, so pods that start normally cost no API call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rljob_operator.conditions import find, set_on

CONTAINERS_WAITING = "ContainersWaiting"
STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "ImageInspectError",
        "RegistryUnavailable",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
"""Waiting reasons of the kubelet that do not go away by themselves (``ContainerCreating`` and
``PodInitializing`` do): what a user must fix, or at least know about."""


@dataclass(frozen=True)
class Waiting:
    reason: str
    message: str


def stuck_container(pod: dict[str, Any]) -> Waiting | None:
    """The first container (init containers first) of ``pod`` waiting for one of :data:`STUCK_REASONS`."""
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_REASONS:
            detail = waiting.get("message") or "no message from the kubelet"
            return Waiting(waiting["reason"], f"pod {name} container {cs.get('name')}: {detail}")
    return None


def with_waiting(status: dict[str, Any], waiting: Waiting, *, now: datetime) -> dict[str, Any] | None:
    """The RLJob status with ``ContainersWaiting`` True for ``waiting``; None when nothing would change
    (the same reason and message already there) or the RLJob has finished (a final status is never
    touched again)."""
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    old = find(list(status.get("conditions") or []), CONTAINERS_WAITING)
    if (
        old
        and old.get("status") == "True"
        and (old.get("reason"), old.get("message"))
        == (
            waiting.reason,
            waiting.message,
        )
    ):
        return None
    conditions = set_on(status, CONTAINERS_WAITING, True, waiting.reason, waiting.message, now=now)
    return {**status, "conditions": conditions}
