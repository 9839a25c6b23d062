"""The RLJob's status as a pure function of (RLJob, its JobSet or None, now).

The handlers feed it every JobSet event and write what it returns; they decide nothing themselves. Rules:

* once ``phase`` is Succeeded or Failed it never changes again (whatever happens to the JobSet later, e.g.
  its TTL deleting it), and nothing is recreated: the handlers check :func:`is_terminal` first;
* the JobSet's own terminal conditions win over everything else; a JobSet that disappears before finishing
  fails the RLJob (reason ``JobSetDeleted``) rather than silently re-running the job;
* ``restarts`` mirrors the JobSet's ``status.restarts`` (disruption restarts included; they do not count
  against ``maxRestarts`` but the user should still see them); each new restart is an Event;
* a JobSet waiting for Kueue's admission (suspended, labelled with the queue, the RLJob not suspended) is
  Queued, not Suspended: only the user suspends. Kueue unsuspends it on admission, which the RLJob shows
  as the ``Queued`` condition turning False and an ``Admitted`` Event; an eviction makes it Queued again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from rljob.api.spec import TERMINAL_PHASES, RLJob
from rljob_operator import progress
from rljob_operator.conditions import Condition, clear_condition, set_condition, set_on, timestamp
from rljob_operator.pod_waiting import CONTAINERS_WAITING
from rljob_operator.slices import slice_shape

# Condition types on the RLJob (documented on RLJobStatus.conditions).
CREATED, RUNNING, SUSPENDED, QUEUED, RESTARTING, SUCCEEDED, FAILED = (
    "Created",
    "Running",
    "Suspended",
    "Queued",
    "Restarting",
    "Succeeded",
    "Failed",
)
REASON_INVALID_SPEC = "InvalidSpec"
REASON_JOBSET_DELETED = "JobSetDeleted"
REASON_CREATE_FAILED = "CreateFailed"
"""Creating a child failed in a way a retry may fix (RBAC, a missing CRD, the apiserver): Pending."""
REASON_CREATE_REJECTED = "CreateRejected"
"""The apiserver refused a child as invalid (400/422): the same object would be refused again, Failed."""
REJECTED_CODES = (400, 422)


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the RLJob."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class StatusUpdate:
    """The status to write (whole, it replaces the old one) and the Events that go with the change."""

    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    changed: bool = False


@dataclass(frozen=True)
class _Observed:
    phase: str
    reason: str
    message: str


def current_status(job: RLJob) -> dict[str, Any]:
    """The RLJob's status in wire form ({} when it has none yet)."""
    return job.status.model_dump(mode="json", exclude_none=True) if job.status else {}


def is_terminal(status: dict[str, Any]) -> bool:
    return status.get("phase") in TERMINAL_PHASES


def generation_of(job: RLJob) -> int | None:
    extra = job.metadata.model_extra or {}
    gen = extra.get("generation")
    return int(gen) if gen is not None else None


def _true_condition(jobset: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (jobset.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            return c
    return None


def _ready_slices(jobset: dict[str, Any]) -> int:
    """Slices whose every host is ready or done (JobSet's per-replicated-Job counters)."""
    rjs = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    return sum(int(r.get("ready", 0)) + int(r.get("succeeded", 0)) for r in rjs)


def _finished(jobset: dict[str, Any], condition: str, terminal_state: str) -> dict[str, Any] | None:
    """The JobSet's terminal condition, or {} when only ``status.terminalState`` says so."""
    cond = _true_condition(jobset, condition)
    if cond is None and (jobset.get("status") or {}).get("terminalState") == terminal_state:
        return {}
    return cond


def observe_jobset(job: RLJob, jobset: dict[str, Any]) -> _Observed:
    """What the JobSet says, as an RLJob phase with a reason and message."""
    if (c := _finished(jobset, "Completed", "Completed")) is not None:
        return _Observed("Succeeded", "JobSetCompleted", c.get("message") or "all slices completed")
    if (c := _finished(jobset, "Failed", "Failed")) is not None:
        return _Observed("Failed", c.get("reason") or "JobSetFailed", c.get("message") or "the JobSet failed")
    if (jobset.get("spec") or {}).get("suspend") or _true_condition(jobset, "Suspended"):
        if job.spec.queueName and not job.spec.suspend:
            return _Observed(
                "Queued",
                "WaitingForAdmission",
                f"queued in Kueue LocalQueue {job.spec.queueName}, waiting for admission",
            )
        return _Observed(
            "Suspended", "Suspended", "spec.suspend is true: the JobSet is suspended, no pods run"
        )
    shape = slice_shape(job.spec.tpu)
    ready, restarts = _ready_slices(jobset), int((jobset.get("status") or {}).get("restarts", 0))
    where = f"{ready}/{shape.slices} slices of {shape.hosts} hosts ready"
    if ready >= shape.slices:
        return _Observed("Running", "AllSlicesReady", where)
    if restarts > 0:
        return _Observed("Restarting", "Restarting", f"restart {restarts}: recreating the slices, {where}")
    return _Observed("Pending", "SlicesStarting", where)


def _conditions_for(
    conds: list[Condition], obs: _Observed, created: bool, *, now: datetime, gen: int | None
) -> list[Condition]:
    kw = {"now": now, "generation": gen}
    if created:
        conds = set_condition(conds, CREATED, True, "JobSetCreated", "the JobSet was created", **kw)
    for type_, phase in (
        (RUNNING, "Running"),
        (SUSPENDED, "Suspended"),
        (QUEUED, "Queued"),
        (RESTARTING, "Restarting"),
    ):
        if obs.phase == phase:
            conds = set_condition(conds, type_, True, obs.reason, obs.message, **kw)
        else:
            conds = clear_condition(conds, type_, obs.reason, obs.message, **kw)
    if obs.phase == "Succeeded":
        conds = set_condition(conds, SUCCEEDED, True, obs.reason, obs.message, **kw)
    if obs.phase == "Failed":
        conds = set_condition(conds, FAILED, True, obs.reason, obs.message, **kw)
    if obs.phase in ("Running", "Succeeded", "Failed"):  # the pod watcher sets it (pod_waiting.py)
        conds = clear_condition(conds, CONTAINERS_WAITING, obs.reason, obs.message, **kw)
    if obs.phase != "Running":  # the progress timer sets it while Running; it means nothing otherwise
        conds = clear_condition(conds, progress.STALLED, obs.reason, obs.message, **kw)
    return conds


def _events(
    old: dict[str, Any], new: dict[str, Any], obs: _Observed, jobset: dict[str, Any] | None, max_restarts: int
) -> list[Event]:
    events: list[Event] = []
    if new.get("restarts", 0) > old.get("restarts", 0):
        counted = int(((jobset or {}).get("status") or {}).get("restartsCountTowardsMax", new["restarts"]))
        events.append(
            Event(
                "Warning",
                "Restarted",
                f"the JobSet restarted all slices (restart {new['restarts']}; {counted} of "
                f"maxRestarts {max_restarts} used, preemption and maintenance do not count)",
            )
        )
    if new.get("phase") != old.get("phase"):
        if obs.phase == "Succeeded":
            events.append(Event("Normal", "Succeeded", obs.message))
        elif obs.phase == "Failed":
            events.append(Event("Warning", "Failed", f"{obs.reason}: {obs.message}"))
        elif obs.phase == "Suspended":
            events.append(Event("Normal", "Suspended", obs.message))
        elif obs.phase == "Queued":
            events.append(Event("Normal", "Queued", obs.message))
        elif old.get("phase") == "Suspended":
            events.append(Event("Normal", "Resumed", f"the JobSet was resumed: {obs.message}"))
        elif old.get("phase") == "Queued":
            events.append(Event("Normal", "Admitted", f"Kueue admitted the JobSet: {obs.message}"))
    return events


def compute_status(
    job: RLJob, jobset: dict[str, Any] | None, *, now: datetime, jobset_deleted: bool = False
) -> StatusUpdate:
    """The RLJob's next status given its JobSet (None: not created yet, or gone).

    ``jobset_deleted`` says the JobSet was seen being deleted (its last state is ``jobset``): if that state
    is not terminal, the run is lost and the RLJob fails.
    """
    old = current_status(job)
    if is_terminal(old):
        return StatusUpdate(status=old)
    gen = generation_of(job)
    new: dict[str, Any] = dict(old)
    new["observedGeneration"] = gen if gen is not None else old.get("observedGeneration")
    if new["observedGeneration"] is None:
        new.pop("observedGeneration")
    created = jobset is not None or bool(old.get("jobSetName"))
    if jobset is not None:
        new["jobSetName"] = jobset["metadata"]["name"]
        new["restarts"] = max(
            int(old.get("restarts", 0)), int((jobset.get("status") or {}).get("restarts", 0))
        )
        new.setdefault("startTime", jobset["metadata"].get("creationTimestamp") or timestamp(now))
        obs = observe_jobset(job, jobset)
        if jobset_deleted and obs.phase not in TERMINAL_PHASES:
            obs = _Observed(
                "Failed",
                REASON_JOBSET_DELETED,
                f"the JobSet {jobset['metadata']['name']} was deleted before it finished",
            )
    elif created:
        obs = _Observed(
            "Failed",
            REASON_JOBSET_DELETED,
            f"the JobSet {old.get('jobSetName')} is gone and the job had not finished",
        )
    else:
        obs = _Observed("Pending", "Creating", "the JobSet is being created")
    new["phase"] = obs.phase
    new["conditions"] = _conditions_for(list(old.get("conditions") or []), obs, created, now=now, gen=gen)
    if obs.phase in TERMINAL_PHASES:
        cond = (
            _true_condition(jobset, "Completed" if obs.phase == "Succeeded" else "Failed") if jobset else None
        )
        new["completionTime"] = (cond or {}).get("lastTransitionTime") or timestamp(now)
        new = progress.finished(new)
    new.setdefault("restarts", 0)
    return StatusUpdate(
        status=new, events=_events(old, new, obs, jobset, job.spec.maxRestarts), changed=new != old
    )


def _failing(old: dict[str, Any], phase: str, generation: int | None) -> dict[str, Any]:
    """The start of a status the operator writes without a JobSet to read (its child could not be made):
    ``phase`` and the generation it answers, ``restarts`` kept as a number."""
    new = dict(old)
    new.update(phase=phase, restarts=int(old.get("restarts", 0)))
    if generation is not None:
        new["observedGeneration"] = generation
    return new


def invalid_spec_status(
    old: dict[str, Any], errors: list[str], *, now: datetime, generation: int | None
) -> StatusUpdate:
    """Failed with reason InvalidSpec: for an RLJob the model rejects (the CRD's CEL should have)."""
    if is_terminal(old):
        return StatusUpdate(status=old)
    message = "; ".join(errors)
    new = _failing(old, "Failed", generation)
    new["completionTime"] = timestamp(now)
    new["conditions"] = set_on(
        old, FAILED, True, REASON_INVALID_SPEC, message, now=now, generation=generation
    )
    return StatusUpdate(status=new, events=[Event("Warning", REASON_INVALID_SPEC, message)], changed=True)


def create_failed_status(
    old: dict[str, Any], kind: str, code: int, message: str, *, now: datetime, generation: int | None
) -> StatusUpdate:
    """A child (ConfigMap or JobSet) could not be created: ``Created`` False with the apiserver's answer,
    phase Failed when it was refused as invalid (400/422: retrying sends the same object), else Pending
    (the create handler retries)."""
    if is_terminal(old):
        return StatusUpdate(status=old)
    rejected = code in REJECTED_CODES
    reason = REASON_CREATE_REJECTED if rejected else REASON_CREATE_FAILED
    text = f"creating the {kind} failed ({code}): {message}"
    kw = {"now": now, "generation": generation}
    new = _failing(old, "Failed" if rejected else "Pending", generation)
    conds = set_on(old, CREATED, False, reason, text, **kw)
    if rejected:
        conds = set_condition(conds, FAILED, True, reason, text, **kw)
        new["completionTime"] = timestamp(now)
    new["conditions"] = conds
    changed = new != old
    return StatusUpdate(
        status=new, events=[Event("Warning", reason, text)] if changed else [], changed=changed
    )
