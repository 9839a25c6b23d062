"""ContainersWaiting: a trainer container the kubelet cannot start shows on the RLJob, with the kubelet's
reason, and clears once the slices are ready (the real kubelet's reasons: tests/e2e/test_rehearsal*.py)."""

from __future__ import annotations

from typing import Any

import pytest
from rljob_operator import reconcile
from rljob_operator.pod_waiting import CONTAINERS_WAITING, stuck_container
from rljob_operator.status import Event

from tests.operator.builders import make_rljob
from tests.operator.fakes import FakeKube

PULL_MESSAGE = 'Back-off pulling image "localhost/nope:dev": ErrImagePull: failed to resolve reference'


def trainer_pod(waiting: dict[str, Any] | None, *, init: bool = False, name: str = "x-slice-0-0-abc") -> dict:
    state = {"waiting": waiting} if waiting else {"running": {"startedAt": "2026-12-03T13:00:00Z"}}
    key = "initContainerStatuses" if init else "containerStatuses"
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"rljob.dev/name": "x"}},
        "status": {"phase": "Pending", key: [{"name": "trainer", "state": state}]},
    }


@pytest.mark.parametrize(
    "reason", ["ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "CreateContainerConfigError"]
)
def test_stuck_reasons_are_reported_with_pod_container_and_kubelet_message(reason: str) -> None:
    got = stuck_container(trainer_pod({"reason": reason, "message": PULL_MESSAGE}))
    assert got is not None and got.reason == reason
    assert got.message == f"pod x-slice-0-0-abc container trainer: {PULL_MESSAGE}"


@pytest.mark.parametrize("waiting", [{"reason": "ContainerCreating"}, {"reason": "PodInitializing"}, None])
def test_normal_start_and_running_are_not_stuck(waiting: dict[str, Any] | None) -> None:
    assert stuck_container(trainer_pod(waiting)) is None


def test_init_container_stuck_counts() -> None:
    got = stuck_container(trainer_pod({"reason": "ImagePullBackOff"}, init=True))
    assert got is not None and got.message.endswith("no message from the kubelet")


def _events() -> list[Event]:
    return []


def test_pod_event_sets_the_condition_once_and_running_slices_clear_it() -> None:
    kube, events = FakeKube(), _events()
    body = kube.add_rljob(make_rljob("x").manifest())
    reconcile.ensure_children(kube, body, post=lambda _o, ev: events.append(ev))
    pod = trainer_pod({"reason": "ErrImageNeverPull", "message": "image not present with pull policy Never"})

    reconcile.on_pod_event(kube, pod)
    st = kube.rljob_status()
    cond = next(c for c in st["conditions"] if c["type"] == CONTAINERS_WAITING)
    assert (st["phase"], cond["status"], cond["reason"]) == ("Pending", "True", "ErrImageNeverPull")
    assert "image not present with pull policy Never" in cond["message"]

    writes = len(kube.calls)
    reconcile.on_pod_event(kube, pod)  # the same again: nothing to write
    reconcile.on_pod_event(kube, trainer_pod(None))  # a running pod: no API call at all
    assert len(kube.calls) == writes

    js = kube.get_jobset("default", "x")
    js["status"] = {"replicatedJobsStatus": [{"name": "slice", "ready": 1}]}
    reconcile.on_jobset_event(kube, "MODIFIED", js, post=lambda _o, ev: events.append(ev))
    st = kube.rljob_status()
    cond = next(c for c in st["conditions"] if c["type"] == CONTAINERS_WAITING)
    assert (st["phase"], cond["status"]) == ("Running", "False")


def test_pod_event_leaves_a_finished_rljob_alone_and_retries_conflicts() -> None:
    kube = FakeKube()
    body = kube.add_rljob(make_rljob("x").manifest())
    reconcile.ensure_children(kube, body, post=lambda _o, _ev: None)
    kube.conflicts_to_inject = 2
    reconcile.on_pod_event(kube, trainer_pod({"reason": "ImagePullBackOff"}))
    assert kube.rljob_status()["conditions"][-1]["reason"] == "ImagePullBackOff"

    kube.objects[("RLJob", "default", "x")]["status"]["phase"] = "Failed"
    before = dict(kube.rljob_status())
    reconcile.on_pod_event(kube, trainer_pod({"reason": "ErrImagePull"}))
    assert kube.rljob_status() == before
