"""Training progress for the RLJob's status, read from trainer host 0's ``/metrics``: parsing and the
status update, as pure functions (the timer in handlers.py fetches, these decide).

Why this channel: the operator already holds the rights it needs (list pods, patch RLJob status); the
trainer needs no Kubernetes API rights at all, and what ``kubectl get rlj`` shows is what Prometheus
scrapes. Host 0 (JAX process 0: slice 0, completion index 0) is the one read: every host completes the
same global steps, and host 0 is where Tunix logs. A single stuck other host is the stall alert's business
(it reads every host); here a host-0 reading is enough to show progress and a stuck job.

Trainer series names read here are checked against the trainer's own registry by a test
(tests/operator/test_progress.py), the same guard the alert rules and the dashboard have.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from rljob_operator.conditions import find, set_on, timestamp

GLOBAL_STEP = "rljob_trainer_global_step"
MAX_STEPS = "rljob_trainer_max_steps"
REWARD_MEAN = "rljob_trainer_reward_mean"
STEP_SUM = "rljob_trainer_step_duration_seconds_sum"
STEP_COUNT = "rljob_trainer_step_duration_seconds_count"
LAST_STEP_TIMESTAMP = "rljob_trainer_last_step_timestamp_seconds"
LAST_STEP_DURATION = "rljob_trainer_last_step_duration_seconds"
STEPS = "rljob_trainer_steps_total"
STALL_THRESHOLD = "rljob_trainer_stall_threshold_seconds"
FIRST_STEP_GRACE = "rljob_trainer_first_step_grace_seconds"
READ = (
    GLOBAL_STEP,
    MAX_STEPS,
    REWARD_MEAN,
    STEP_SUM,
    STEP_COUNT,
    LAST_STEP_TIMESTAMP,
    LAST_STEP_DURATION,
    STEPS,
    STALL_THRESHOLD,
    FIRST_STEP_GRACE,
)

STALLED = "Stalled"
"""Condition type: no step on host 0 within its limit."""

HEARTBEAT_SECONDS = 60.0
"""While host 0 reports nothing new, the status is still rewritten this often, so ``updateTime`` (and the
Stalled condition's "last step ... ago") stay at most this old while the operator can read host 0."""


@dataclass(frozen=True)
class Reading:
    """What host 0 says about its training."""

    step: int
    max_steps: int
    steps: int
    """Steps this trainer process completed (0: still in its first step)."""
    last_step_time: float
    """Unix time of the last step (the process start before its first step)."""
    stall_threshold: float
    first_step_grace: float
    reward_mean: float | None = None
    steady_seconds: float = 0.0
    steady_steps: int = 0
    last_step_seconds: float | None = None


def series_name(line: str) -> str:
    """The series a line of the text exposition is a sample of ("#" for comments)."""
    return line.split("{", 1)[0].split(" ", 1)[0]


def parse(text: str) -> Reading | None:
    """A Reading from host 0's Prometheus text exposition; None when the series it needs are missing
    (not a trainer, or an older one).

    Only the lines of the series read here go to prometheus-client's parser (as untyped samples: their
    names and values are the same): a trainer serves ~250 lines, mostly histogram buckets, and parsing all
    of them cost 13 ms of CPU per read (55-65 ms wall on the loaded 2-core CI machine), these ~12 lines 1 ms
    (docs/observability.md, "Progress in the RLJob status")."""
    wanted = "".join(f"{line}\n" for line in text.splitlines() if series_name(line) in READ)
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(wanted):
        for s in family.samples:
            if s.labels.get("process", "0") != "0":
                continue
            if s.name in (STEP_SUM, STEP_COUNT):
                if s.labels.get("compiled") == "false":
                    values[s.name] = s.value
            elif s.name in READ:
                values[s.name] = s.value
    required = (GLOBAL_STEP, MAX_STEPS, STEPS, LAST_STEP_TIMESTAMP, STALL_THRESHOLD, FIRST_STEP_GRACE)
    if any(name not in values for name in required):
        return None
    return Reading(
        step=int(values[GLOBAL_STEP]),
        max_steps=int(values[MAX_STEPS]),
        steps=int(values[STEPS]),
        last_step_time=values[LAST_STEP_TIMESTAMP],
        stall_threshold=values[STALL_THRESHOLD],
        first_step_grace=values[FIRST_STEP_GRACE],
        reward_mean=values.get(REWARD_MEAN),
        steady_seconds=values.get(STEP_SUM, 0.0),
        steady_steps=int(values.get(STEP_COUNT, 0)),
        last_step_seconds=values.get(LAST_STEP_DURATION),
    )


def duration(seconds: float) -> str:
    """Like kubectl's ages: 45s, 12m30s, 3h5m, 2d4h."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m" if s % 3600 // 60 else f"{s // 3600}h"
    return f"{s // 86400}d{s % 86400 // 3600}h" if s % 86400 // 3600 else f"{s // 86400}d"


def progress(r: Reading, now: datetime) -> dict[str, Any]:
    """``status.progress`` in wire form."""
    out: dict[str, Any] = {"step": r.step, "maxSteps": r.max_steps}
    if r.reward_mean is not None and r.steps > 0:
        out["rewardMean"] = round(r.reward_mean, 4)
    mean = r.steady_seconds / r.steady_steps if r.steady_steps else None
    if mean is not None:
        out["meanStepSeconds"] = round(mean, 3)
    if r.last_step_seconds is not None and r.steps > 0:
        out["lastStepSeconds"] = round(r.last_step_seconds, 3)
    if r.steps > 0:
        out["lastStepTime"] = timestamp(datetime.fromtimestamp(r.last_step_time, tz=now.tzinfo))
    if r.step >= r.max_steps:
        out["eta"] = "0s"
    elif mean is not None:
        out["eta"] = duration((r.max_steps - r.step) * mean)
    out["updateTime"] = timestamp(now)
    return out


def stalled(r: Reading, now: datetime) -> tuple[bool, str, str]:
    """(stalled, reason, message): no step within the limit the trainer exports (its first-step grace
    until this process completed a step, its stall threshold after), the same rule as the stall alert."""
    since = now.timestamp() - r.last_step_time
    if r.step >= r.max_steps:
        return False, "Finished", f"all {r.max_steps} steps completed"
    if r.steps == 0:
        limit, what = r.first_step_grace, "first-step grace"
    else:
        limit, what = r.stall_threshold, "stall threshold"
    if since > limit:
        return True, "NoStep", f"no step on trainer host 0 for {duration(since)} ({what} {duration(limit)})"
    return False, "Stepping", f"last step on trainer host 0 {duration(since)} ago ({what} {duration(limit)})"


def with_progress(
    status: dict[str, Any], r: Reading, *, now: datetime, generation: int | None = None
) -> dict[str, Any]:
    """The RLJob status with ``progress`` and the Stalled condition from ``r`` (other fields untouched)."""
    new = dict(status)
    new["progress"] = progress(r, now)
    is_stalled, reason, message = stalled(r, now)
    new["conditions"] = set_on(status, STALLED, is_stalled, reason, message, now=now, generation=generation)
    return new


def needs_write(old: dict[str, Any], new: dict[str, Any], now: datetime) -> bool:
    """Whether ``new`` (from :func:`with_progress`) says something ``old`` does not: a changed progress
    figure or Stalled status/reason, or ``old``'s progress older than :data:`HEARTBEAT_SECONDS`.

    Why: each status write is an API call and a watch event every RLJob handler then sees; with the step
    unchanged between reads (a step usually lasts longer than the read interval) most writes changed only
    ``updateTime`` and the condition's "ago" text (bench/burst.py --running, docs/observability.md)."""
    before, after = old.get("progress") or {}, new.get("progress") or {}
    if {k: v for k, v in before.items() if k != "updateTime"} != {
        k: v for k, v in after.items() if k != "updateTime"
    }:
        return True
    was, now_is = find(old.get("conditions") or [], STALLED), find(new.get("conditions") or [], STALLED)
    if was is None or now_is is None:
        return True
    if (was.get("status"), was.get("reason")) != (now_is.get("status"), now_is.get("reason")):
        return True
    try:
        written = datetime.fromisoformat(before["updateTime"])
    except (KeyError, TypeError, ValueError):
        return True
    return (now - written).total_seconds() >= HEARTBEAT_SECONDS


def finished(status: dict[str, Any]) -> dict[str, Any]:
    """A terminal RLJob's progress: no ETA (nothing is left to estimate), the last numbers kept."""
    prog = status.get("progress")
    if not prog or "eta" not in prog:
        return status
    return {**status, "progress": {k: v for k, v in prog.items() if k != "eta"}}
