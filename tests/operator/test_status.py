"""Table-driven tests of the status function: (RLJob, JobSet or None) -> status + Events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from rljob_operator.conditions import set_condition
from rljob_operator.status import compute_status, invalid_spec_status

from tests.operator.builders import JobSetBuilder, RLJobBuilder, make_jobset, make_rljob

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
T_NOW = "2025-01-02T03:04:05Z"
T_OLD = "2024-12-31T00:00:00Z"


def cond(type_: str, status: str = "True", reason: str = "", at: str = T_OLD, message: str = "m") -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


@dataclass
class Case:
    name: str
    job: RLJobBuilder
    jobset: JobSetBuilder | None
    phase: str
    conditions: dict[str, str] = field(default_factory=dict)  # type -> status
    reason: str | None = None  # reason of the condition named by `phase` (or Failed)
    events: list[str] = field(default_factory=list)  # Event reasons
    restarts: int = 0
    deleted: bool = False


def v6e(slices: int = 2) -> RLJobBuilder:
    return make_rljob("x").tpu("tpu-v6e-slice", "4x4").slices(slices)


CASES = [
    Case("not created yet", v6e(), None, "Pending"),
    Case(
        "created, pods starting",
        v6e(),
        make_jobset(slices=2).jobs(active=2, ready=1),
        "Pending",
        {"Created": "True"},
    ),
    Case(
        "all slices ready",
        v6e(),
        make_jobset(slices=2).running(),
        "Running",
        {"Created": "True", "Running": "True"},
        reason="AllSlicesReady",
    ),
    Case(
        "restarting after a failure",
        v6e().status(
            phase="Running", restarts=0, jobSetName="x", conditions=[cond("Running", reason="AllSlicesReady")]
        ),
        make_jobset(slices=2).restarts(1).jobs(active=2, ready=0),
        "Restarting",
        {"Created": "True", "Running": "False", "Restarting": "True"},
        events=["Restarted"],
        restarts=1,
    ),
    Case(
        "running again after a restart",
        v6e().status(
            phase="Restarting",
            restarts=1,
            jobSetName="x",
            conditions=[cond("Restarting", reason="Restarting")],
        ),
        make_jobset(slices=2).restarts(1).running(),
        "Running",
        {"Created": "True", "Running": "True", "Restarting": "False"},
        restarts=1,
    ),
    Case(
        "suspended by the user",
        v6e().suspend(),
        make_jobset(slices=2).suspended(),
        "Suspended",
        {"Created": "True", "Suspended": "True"},
        events=["Suspended"],
    ),
    Case(
        "resumed",
        v6e().status(phase="Suspended", jobSetName="x", conditions=[cond("Suspended")]),
        make_jobset(slices=2).jobs(active=2),
        "Pending",
        {"Suspended": "False"},
        events=["Resumed"],
    ),
    Case(
        "queued in Kueue is Queued, not Suspended",
        v6e().queue("q"),
        make_jobset(slices=2).suspended(),
        "Queued",
        {"Created": "True", "Queued": "True"},
        reason="WaitingForAdmission",
        events=["Queued"],
    ),
    Case(
        "admitted by Kueue",
        v6e().queue("q").status(phase="Queued", jobSetName="x", conditions=[cond("Queued")]),
        make_jobset(slices=2).jobs(active=2),
        "Pending",
        {"Queued": "False"},
        events=["Admitted"],
    ),
    Case(
        "suspended by the user while queued",
        v6e().queue("q").suspend().status(phase="Queued", jobSetName="x", conditions=[cond("Queued")]),
        make_jobset(slices=2).suspended(),
        "Suspended",
        {"Suspended": "True", "Queued": "False"},
        events=["Suspended"],
    ),
    Case(
        "succeeded",
        v6e(),
        make_jobset(slices=2).completed(),
        "Succeeded",
        {"Created": "True", "Succeeded": "True"},
        reason="JobSetCompleted",
        events=["Succeeded"],
    ),
    Case(
        "failed: max restarts",
        v6e().status(phase="Running", restarts=2, jobSetName="x"),
        make_jobset(slices=2).restarts(3).failed(),
        "Failed",
        {"Failed": "True"},
        reason="ReachedMaxRestarts",
        events=["Restarted", "Failed"],
        restarts=3,
    ),
    Case(
        "failed: bad config (FailJobSet)",
        v6e(),
        make_jobset(slices=2).failed(reason="FailurePolicy", message="exit code 2"),
        "Failed",
        {"Failed": "True"},
        reason="FailurePolicy",
        events=["Failed"],
    ),
    Case(
        "JobSet deleted while running",
        v6e().status(phase="Running", jobSetName="x", conditions=[cond("Running")]),
        make_jobset(slices=2).running(),
        "Failed",
        {"Failed": "True", "Running": "False"},
        reason="JobSetDeleted",
        events=["Failed"],
        deleted=True,
    ),
    Case(
        "JobSet gone while running",
        v6e().status(phase="Running", jobSetName="x"),
        None,
        "Failed",
        {"Failed": "True"},
        reason="JobSetDeleted",
        events=["Failed"],
    ),
    Case(
        "JobSet deleted after completing: its last state wins",
        v6e().status(phase="Running", jobSetName="x"),
        make_jobset(slices=2).completed(),
        "Succeeded",
        {"Succeeded": "True"},
        events=["Succeeded"],
        deleted=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_compute_status(case: Case) -> None:
    js = case.jobset.obj() if case.jobset else None
    up = compute_status(case.job.obj(), js, now=NOW, jobset_deleted=case.deleted)
    st = up.status
    assert st["phase"] == case.phase
    got = {c["type"]: c["status"] for c in st.get("conditions", [])}
    for type_, status in case.conditions.items():
        assert got.get(type_) == status, (type_, st["conditions"])
    if case.reason:
        type_ = case.phase if case.phase in ("Running", "Queued", "Succeeded", "Failed") else "Failed"
        assert next(c for c in st["conditions"] if c["type"] == type_)["reason"] == case.reason
    assert [e.reason for e in up.events] == case.events
    assert st["restarts"] == case.restarts
    assert st["observedGeneration"] == 1
    if js is not None:
        assert st["jobSetName"] == "x" and st["startTime"] == "2025-01-01T00:00:00Z"
    if case.phase in ("Succeeded", "Failed"):
        assert "completionTime" in st


def test_terminal_never_changes() -> None:
    for phase in ("Succeeded", "Failed"):
        job = v6e().status(phase=phase, jobSetName="x", restarts=1).obj()
        for js in (None, make_jobset(slices=2).running().obj(), make_jobset(slices=2).suspended().obj()):
            up = compute_status(job, js, now=NOW)
            assert not up.changed and up.events == [] and up.status["phase"] == phase


def test_unchanged_status_is_not_rewritten() -> None:
    js = make_jobset(slices=2).running().obj()
    first = compute_status(v6e().obj(), js, now=NOW)
    again = compute_status(v6e().status(**first.status).obj(), js, now=datetime(2025, 2, 1, tzinfo=UTC))
    assert not again.changed and again.events == []
    assert again.status == first.status


def test_completion_time_from_the_jobset() -> None:
    up = compute_status(
        v6e().obj(), make_jobset(slices=2).completed(at="2025-01-01T05:00:00Z").obj(), now=NOW
    )
    assert up.status["completionTime"] == "2025-01-01T05:00:00Z"


def test_restart_event_says_how_many_count() -> None:
    js = make_jobset(slices=2).restarts(2).jobs(active=2).obj()
    js["status"]["restartsCountTowardsMax"] = 1
    up = compute_status(v6e().max_restarts(3).status(restarts=1, jobSetName="x").obj(), js, now=NOW)
    assert "restart 2; 1 of maxRestarts 3 used" in up.events[0].message


def test_invalid_spec() -> None:
    up = invalid_spec_status({}, ["spec.tpu.topology: bad", "spec.x: worse"], now=NOW, generation=4)
    st = up.status
    assert st["phase"] == "Failed" and st["observedGeneration"] == 4
    c = st["conditions"][0]
    assert (c["type"], c["reason"]) == ("Failed", "InvalidSpec")
    assert "spec.tpu.topology" in c["message"]
    assert [e.reason for e in up.events] == ["InvalidSpec"]
    assert not invalid_spec_status(st, ["again"], now=NOW, generation=5).changed


# --- conditions --------------------------------------------------------------------------------------


def _c(conds: list[dict[str, Any]], t: str) -> dict[str, Any]:
    return next(c for c in conds if c["type"] == t)


def test_condition_keeps_transition_time_when_only_message_changes() -> None:
    conds = [cond("Running", "True", "A", T_OLD, "old")]
    out = set_condition(conds, "Running", True, "B", "new", now=NOW)
    assert _c(out, "Running") == {
        "type": "Running",
        "status": "True",
        "reason": "B",
        "message": "new",
        "lastTransitionTime": T_OLD,
    }
    assert conds[0]["message"] == "old", "input not mutated"


def test_condition_moves_transition_time_on_flip() -> None:
    out = set_condition([cond("Running", "True", at=T_OLD)], "Running", False, "Stopped", "m", now=NOW)
    assert _c(out, "Running")["lastTransitionTime"] == T_NOW


def test_condition_order_is_stable() -> None:
    conds = [cond("Created"), cond("Running"), cond("Suspended", "False")]
    out = set_condition(conds, "Running", False, "r", "m", now=NOW)
    assert [c["type"] for c in out] == ["Created", "Running", "Suspended"]
