"""The handlers' logic against an in-memory API (``fakes.FakeKube``): create once, adopt, never recreate,
suspend toggles only the JobSet's suspend, JobSet events drive the status, invalid specs fail cleanly."""

from __future__ import annotations

import json
from typing import Any

import kopf
import pytest
from rljob_operator import reconcile
from rljob_operator.names import QUEUE_LABEL
from rljob_operator.status import Event

from tests.operator.builders import make_rljob
from tests.operator.fakes import FakeKube


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def events() -> list[Event]:
    return []


def _post(events: list[Event]):
    return lambda _obj, ev: events.append(ev)


def _create(kube: FakeKube, events: list[Event], manifest: dict[str, Any]) -> dict[str, Any]:
    body = kube.add_rljob(manifest)
    outcome = reconcile.ensure_children(kube, body, post=_post(events))
    body["outcome"] = outcome
    return body


def test_create_makes_configmap_then_jobset_owned(kube, events):
    body = _create(kube, events, make_rljob("x").tpu("tpu-v6e-slice", "4x4").slices(2).manifest())
    assert body["outcome"] == "created"
    assert [c[:2] for c in kube.calls if c[0] == "create"] == [("create", "ConfigMap"), ("create", "JobSet")]
    js = kube.get_jobset("default", "x")
    ref = js["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("RLJob", "x", "uid-1", True)
    cm = kube.objects[("ConfigMap", "default", "x-config")]
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    st = kube.rljob_status()
    assert st["phase"] == "Pending" and st["jobSetName"] == "x"
    assert [e.reason for e in events] == ["Created"]
    assert "2 x tpu-v6e-slice 4x4 (4 hosts x 4 chips per slice)" in events[0].message


def test_create_twice_is_success_and_creates_nothing_new(kube, events):
    body = _create(kube, events, make_rljob("x").manifest())
    kube.objects[("RLJob", "default", "x")].pop("status")  # as if the status write had been lost
    again = reconcile.ensure_children(kube, kube.get_rljob("default", "x") or body, post=_post(events))
    assert again == "existed"
    assert [e.reason for e in events] == ["Created"], "no second Created event"
    assert kube.rljob_status()["phase"] == "Pending"


def test_resume_after_terminal_recreates_nothing(kube, events):
    """A finished RLJob whose JobSet the TTL deleted: the JobSet is not recreated."""
    _create(kube, events, make_rljob("x").manifest())
    js = kube.objects[("JobSet", "default", "x")]
    js["status"] = {
        "terminalState": "Completed",
        "conditions": [
            {
                "type": "Completed",
                "status": "True",
                "reason": "AllJobsCompleted",
                "message": "done",
                "lastTransitionTime": "2025-01-01T02:00:00Z",
            }
        ],
    }
    reconcile.on_jobset_event(kube, "MODIFIED", js, post=_post(events))
    assert kube.rljob_status()["phase"] == "Succeeded"
    del kube.objects[("JobSet", "default", "x")]  # TTL
    reconcile.on_jobset_event(kube, "DELETED", js, post=_post(events))
    kube.calls.clear()
    assert reconcile.ensure_children(kube, kube.get_rljob("default", "x"), post=_post(events)) == "terminal"
    assert kube.calls == [] and kube.get_jobset("default", "x") is None
    assert kube.rljob_status()["phase"] == "Succeeded"
    assert [e.reason for e in events] == ["Created", "Succeeded"]


def test_resume_with_jobset_gone_before_finishing_fails(kube, events):
    _create(kube, events, make_rljob("x").manifest())
    del kube.objects[("JobSet", "default", "x")]
    reconcile.ensure_children(kube, kube.get_rljob("default", "x"), post=_post(events))
    assert kube.rljob_status()["phase"] == "Failed"
    assert not any(c[0] == "create" and c[1] == "JobSet" for c in kube.calls[2:])


def test_invalid_spec_fails_and_creates_nothing(kube, events):
    m = make_rljob("x").manifest()
    m["spec"]["tpu"]["topology"] = "3x3"  # CEL would refuse it; the operator defends anyway
    assert _create(kube, events, m)["outcome"] == "invalid"
    assert not [c for c in kube.calls if c[0] == "create"]
    st = kube.rljob_status()
    assert st["phase"] == "Failed"
    assert (
        st["conditions"][0]["reason"] == "InvalidSpec"
        and "spec.tpu.topology" in st["conditions"][0]["message"]
    )
    assert [e.reason for e in events] == ["InvalidSpec"]


def test_suspend_toggles_only_the_jobset_suspend(kube, events):
    body = _create(kube, events, make_rljob("x").manifest())
    before = kube.get_jobset("default", "x")
    reconcile.toggle_suspend(kube, body, True)
    after = kube.get_jobset("default", "x")
    assert after["spec"].pop("suspend") is True
    before["spec"].pop("suspend")
    assert after["spec"] == before["spec"]


def test_suspend_before_the_jobset_exists_is_fine(kube):
    body = kube.add_rljob(make_rljob("x").manifest())
    reconcile.toggle_suspend(kube, body, True)  # the create handler renders the current spec.suspend
    assert not [c for c in kube.calls if c[0] == "suspend"]


def _jobset_writes(kube: FakeKube) -> list[tuple[str, ...]]:
    return [c for c in kube.calls if c[0] in ("suspend", "label")]


def test_queued_suspend_and_resume_toggle_the_workload_never_the_jobset(kube, events):
    """Kueue owns a queued JobSet's spec.suspend: the operator deactivates/activates the Workload."""
    body = _create(kube, events, make_rljob("x").queue("lq").manifest())
    with pytest.raises(kopf.TemporaryError):  # Kueue has not made the Workload yet: retried
        reconcile.toggle_suspend(kube, body, True, post=_post(events))
    kube.add_workload("default", "uid-x")
    assert kube.rljob_status()["phase"] == "Queued"
    kube.objects[("RLJob", "default", "x")]["spec"]["suspend"] = True
    reconcile.toggle_suspend(kube, body, True, post=_post(events))
    assert kube.objects[("Workload", "default", "jobset-uid-x")]["active"] is False
    assert kube.rljob_status()["phase"] == "Suspended", "no JobSet event follows: the status is synced here"
    kube.objects[("RLJob", "default", "x")]["spec"]["suspend"] = False
    reconcile.toggle_suspend(kube, body, False, post=_post(events))
    assert kube.objects[("Workload", "default", "jobset-uid-x")]["active"] is True
    assert kube.rljob_status()["phase"] == "Queued"
    assert not _jobset_writes(kube)
    assert kube.get_jobset("default", "x")["spec"]["suspend"] is True, "created suspended, Kueue starts it"


def test_queued_rljob_created_suspended_is_handed_to_kueue_on_resume(kube, events):
    """Suspended at creation: no queue label (Kueue would admit and start it); resuming adds the label."""
    body = _create(kube, events, make_rljob("x").queue("lq").suspend().manifest())
    assert QUEUE_LABEL not in kube.get_jobset("default", "x")["metadata"]["labels"]
    reconcile.toggle_suspend(kube, body, True, post=_post(events))
    assert not _jobset_writes(kube)
    reconcile.toggle_suspend(kube, body, False, post=_post(events))
    assert _jobset_writes(kube) == [("label", "default", "x", QUEUE_LABEL, "lq")]
    assert kube.get_jobset("default", "x")["spec"]["suspend"] is True


def test_jobset_events_drive_phase_and_restart_events(kube, events):
    _create(kube, events, make_rljob("x").manifest())
    js = kube.get_jobset("default", "x")
    js["status"] = {
        "replicatedJobsStatus": [
            {"name": "slice", "active": 1, "ready": 1, "succeeded": 0, "failed": 0, "suspended": 0}
        ]
    }
    reconcile.on_jobset_event(kube, "MODIFIED", js, post=_post(events))
    assert kube.rljob_status()["phase"] == "Running"
    js["status"] = {"restarts": 1, "restartsCountTowardsMax": 1, "replicatedJobsStatus": []}
    reconcile.on_jobset_event(kube, "MODIFIED", js, post=_post(events))
    assert kube.rljob_status()["phase"] == "Restarting" and kube.rljob_status()["restarts"] == 1
    js["status"] = {
        "restarts": 1,
        "terminalState": "Failed",
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "FailedJobs",
                "message": "jobset failed",
                "lastTransitionTime": "2025-01-01T02:00:00Z",
            }
        ],
    }
    reconcile.on_jobset_event(kube, "MODIFIED", js, post=_post(events))
    st = kube.rljob_status()
    assert st["phase"] == "Failed" and st["completionTime"] == "2025-01-01T02:00:00Z"
    assert [e.reason for e in events] == ["Created", "Restarted", "Failed"]


def test_status_write_retries_on_conflict(kube, events):
    _create(kube, events, make_rljob("x").manifest())
    js = kube.get_jobset("default", "x")
    js["status"] = {"replicatedJobsStatus": [{"name": "slice", "ready": 1}]}
    kube.conflicts_to_inject = 2
    reconcile.on_jobset_event(kube, "MODIFIED", js, post=_post(events))
    assert kube.rljob_status()["phase"] == "Running"


def test_jobset_of_a_previous_rljob_with_the_same_name_is_ignored(kube, events):
    _create(kube, events, make_rljob("x").manifest())
    js = kube.get_jobset("default", "x")
    js["metadata"]["ownerReferences"][0]["uid"] = "uid-of-an-older-rljob"
    js["status"] = {"replicatedJobsStatus": [{"name": "slice", "ready": 1}]}
    reconcile.on_jobset_event(kube, "DELETED", js, post=_post(events))
    assert kube.rljob_status()["phase"] == "Pending"


def test_unowned_jobset_is_ignored(kube, events):
    reconcile.on_jobset_event(
        kube, "ADDED", {"metadata": {"name": "y", "namespace": "default"}}, post=_post(events)
    )
    assert events == []


def _api_error(status: int, message: str) -> Any:
    from kubernetes.client.exceptions import ApiException

    exc = ApiException(status=status, reason="Error")
    exc.body = json.dumps({"kind": "Status", "message": message})
    return exc


def test_jobset_refused_as_invalid_fails_the_rljob_with_the_reason(kube, events):
    kube.create_errors["JobSet"] = _api_error(422, 'admission webhook "vjobset" denied the request')
    body = _create(kube, events, make_rljob("x").manifest())
    assert body["outcome"] == "rejected"
    st = kube.rljob_status()
    assert st["phase"] == "Failed"
    created = next(c for c in st["conditions"] if c["type"] == "Created")
    assert (created["status"], created["reason"]) == ("False", "CreateRejected")
    assert (
        created["message"]
        == 'creating the JobSet failed (422): admission webhook "vjobset" denied the request'
    )
    assert [e.reason for e in events] == ["CreateRejected"]
    assert reconcile.ensure_children(kube, kube.get_rljob("default", "x"), post=_post(events)) == "terminal"


def test_retryable_create_failure_is_pending_with_the_reason_then_recovers(kube, events):
    import kopf

    kube.create_errors["JobSet"] = _api_error(403, "jobsets.jobset.x-k8s.io is forbidden")
    body = kube.add_rljob(make_rljob("x").manifest())
    with pytest.raises(kopf.TemporaryError, match="403"):
        reconcile.ensure_children(kube, body, post=_post(events))
    st = kube.rljob_status()
    created = next(c for c in st["conditions"] if c["type"] == "Created")
    assert st["phase"] == "Pending" and (created["status"], created["reason"]) == ("False", "CreateFailed")
    assert "forbidden" in created["message"]
    # kopf retries; the apiserver lets it through now
    assert reconcile.ensure_children(kube, kube.get_rljob("default", "x"), post=_post(events)) == "created"
    created = next(c for c in kube.rljob_status()["conditions"] if c["type"] == "Created")
    assert created["status"] == "True"
