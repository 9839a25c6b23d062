"""status.progress and the Stalled condition from a trainer's real /metrics text (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from prometheus_client import generate_latest
from rljob_operator import progress as p
from rljob_operator.progress_refresh import write
from rljob_trainer.telemetry.metrics import TrainerMetrics
from rljob_trainer.telemetry.progress import StepReport

from tests.operator.fakes import FakeKube

NOW = datetime(2026, 12, 2, 20, 0, 0, tzinfo=UTC)


def _report(step: int, seconds: float, reward: float) -> StepReport:
    return StepReport(
        step=step,
        max_steps=10,
        seconds=seconds,
        phase_seconds={"rollout": seconds / 2},
        rewards=np.array([reward, reward]),
        real_tokens=10,
        slot_tokens=16,
        used_slot_tokens=16,
        packed=False,
    )


def _text(steps: list[tuple[float, float]], **kw) -> str:
    tm = TrainerMetrics(
        rljob="j", max_steps=10, stall_threshold_seconds=300, first_step_grace_seconds=900, **kw
    )
    for i, (secs, reward) in enumerate(steps, start=1):
        tm(_report(i, secs, reward))
    return generate_latest(tm.registry).decode()


def test_names_read_are_the_trainers() -> None:
    assert set(p.READ) <= TrainerMetrics(rljob="x").names()


def test_progress_from_a_trainer_after_four_steps() -> None:
    r = p.parse(_text([(30.0, 0.1), (2.0, 0.2), (4.0, 0.3), (3.0, 0.5)]))
    assert r is not None
    now = datetime.fromtimestamp(r.last_step_time + 5, tz=UTC)
    prog = p.progress(r, now)
    # the first (compiling) step is not in the mean: (2 + 4 + 3) / 3 = 3 s; 6 steps left -> 18 s
    assert prog["step"] == 4 and prog["maxSteps"] == 10
    assert prog["rewardMean"] == 0.5 and prog["meanStepSeconds"] == 3.0 and prog["lastStepSeconds"] == 3.0
    assert prog["eta"] == "18s"
    assert p.stalled(r, now) == (False, "Stepping", "last step on trainer host 0 5s ago (stall threshold 5m)")


def test_stalled_uses_the_grace_before_the_first_step_and_the_threshold_after() -> None:
    fresh = p.parse(_text([]))
    assert fresh is not None and fresh.steps == 0
    at = fresh.last_step_time
    assert not p.stalled(fresh, datetime.fromtimestamp(at + 600, tz=UTC))[0]  # compiling: 600 < 900
    assert p.stalled(fresh, datetime.fromtimestamp(at + 901, tz=UTC))[0]
    stepping = p.parse(_text([(30.0, 0.1), (2.0, 0.2)]))
    assert stepping is not None
    later = datetime.fromtimestamp(stepping.last_step_time + 301, tz=UTC)
    assert p.stalled(stepping, later) == (
        True,
        "NoStep",
        "no step on trainer host 0 for 5m1s (stall threshold 5m)",
    )
    assert "eta" not in p.progress(fresh, NOW) and "lastStepTime" not in p.progress(fresh, NOW)


def test_finished_run_is_not_stalled_and_eta_is_zero() -> None:
    r = p.parse(_text([(1.0, 1.0)] * 10))
    assert r is not None
    late = datetime.fromtimestamp(r.last_step_time + 10_000, tz=UTC)
    assert p.stalled(r, late)[0] is False and p.progress(r, late)["eta"] == "0s"


def test_with_progress_sets_the_condition_and_keeps_the_rest() -> None:
    r = p.parse(_text([(30.0, 0.1), (2.0, 0.2)]))
    assert r is not None
    old = {"phase": "Running", "restarts": 1, "conditions": [{"type": "Running", "status": "True"}]}
    late = datetime.fromtimestamp(r.last_step_time + 1000, tz=UTC)
    new = p.with_progress(old, r, now=late, generation=3)
    assert new["phase"] == "Running" and new["restarts"] == 1 and old == {**old}
    assert [c["type"] for c in new["conditions"]] == ["Running", "Stalled"]
    assert new["conditions"][1]["status"] == "True" and new["conditions"][1]["observedGeneration"] == 3
    assert "eta" not in p.finished(new)["progress"] and p.finished(new)["progress"]["step"] == 2


def test_parse_refuses_what_is_not_a_trainer() -> None:
    assert p.parse("# nothing\nsome_other_metric 1\n") is None
    two_hosts = _text([(1.0, 0.2)]).replace('process="0"', 'process="1"')
    assert p.parse(two_hosts) is None  # host 0's series only


def test_duration_reads_like_kubectl() -> None:
    assert [p.duration(s) for s in (0, 59.6, 60, 754, 3600, 3725, 90000, 86400 * 3)] == [
        "0s", "1m", "1m", "12m34s", "1h", "1h2m", "1d1h", "3d",
    ]  # fmt: skip


def test_write_uses_the_timers_body_first_and_rereads_only_after_a_conflict() -> None:
    kube = FakeKube()
    manifest = {"metadata": {"namespace": "ns", "name": "x"}, "status": {"phase": "Running"}}
    body = kube.add_rljob(manifest)
    gets: list[str] = []
    get = kube.get_rljob
    kube.get_rljob = lambda ns, name: gets.append(name) or get(ns, name)  # type: ignore[method-assign]
    reading = p.parse(_text([(2.0, 0.5)]))
    assert reading is not None
    assert write(kube, "ns", "x", reading, "uid-1", current=body) and gets == []  # no GET before the write
    assert kube.rljob_status("ns", "x")["progress"]["step"] == 1
    kube.conflicts_to_inject = 1  # someone wrote in between: the body's resourceVersion is stale
    later = p.parse(_text([(2.0, 0.5), (2.0, 0.7)]))
    assert later is not None
    assert write(kube, "ns", "x", later, "uid-1", current=body) and gets == ["x"]
    assert kube.rljob_status("ns", "x")["progress"]["step"] == 2


def test_write_skips_a_status_that_says_nothing_new_until_the_heartbeat() -> None:
    kube = FakeKube()
    kube.add_rljob({"metadata": {"namespace": "ns", "name": "x"}, "status": {"phase": "Running"}})
    one = p.parse(_text([(2.0, 0.5)]))
    assert one is not None

    def writes() -> int:
        return sum(1 for c in kube.calls if c[0] == "status")

    assert write(kube, "ns", "x", one, None) and writes() == 1
    assert not write(kube, "ns", "x", one, None) and writes() == 1  # same step, just written: skipped
    two = p.parse(_text([(2.0, 0.5), (2.0, 0.7)]))
    assert two is not None
    assert write(kube, "ns", "x", two, None) and writes() == 2  # a new step is written at once
    # the same reading once the last write is a heartbeat old: written again (updateTime moves on)
    status = kube.rljob_status("ns", "x")
    written = datetime.fromisoformat(status["progress"]["updateTime"])
    assert not p.needs_write(status, p.with_progress(status, two, now=written), written)
    beat = written + timedelta(seconds=p.HEARTBEAT_SECONDS)
    assert p.needs_write(status, p.with_progress(status, two, now=beat), beat)
    # Stalled flipping is news even within the heartbeat
    stalled_at = datetime.fromtimestamp(two.last_step_time + 301, tz=UTC)
    status["progress"]["updateTime"] = p.timestamp(stalled_at)
    assert p.needs_write(status, p.with_progress(status, two, now=stalled_at), stalled_at)
