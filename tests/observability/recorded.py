"""Recorded series of a two-host training run, in three versions, for evaluating the dashboard's queries
on a real Prometheus (test_dashboard_eval.py).

- ``steady``: two trainer pods (processes 0 and 1), scraped every 15 s for 40 minutes.
- ``restart``: the same run, but a JobSet restart at 15 m replaces both pods (new ``pod``, restart_attempt
  1); the new processes' counters start again from 0, the global step continues. Nothing marks the old
  series stale (backfilled blocks hold no staleness markers, like GKE Managed Prometheus), so for 5 minutes
  an instant query still sees them.
- ``dup``: the steady run scraped by two jobs (``job="a"`` and ``job="b"``), every series twice.

The same truth in all three: the dashboard must show the same figures for each (within the restart's
lost seconds). Written as OpenMetrics text and loaded with ``promtool tsdb create-blocks-from
openmetrics`` (the backfill tool Prometheus ships), so the server queries them as stored blocks.
"""

from __future__ import annotations

from collections.abc import Iterator

SCRAPE = 15  # seconds
MINUTES = 40
RESTART_AT = 15 * 60  # seconds from the start, in ``restart``
STEP_SECONDS = 10.0  # one global step every 10 s
SCENARIOS = ("steady", "restart", "dup")


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def _trainer(t: float, since: float) -> list[tuple[str, dict[str, str], float]]:
    """Every series one trainer process serves, ``t`` seconds into the run, its process started at
    ``since`` (its counters count from there)."""
    up = t - since
    steps = up / STEP_SECONDS
    global_step = t // STEP_SECONDS
    out: list[tuple[str, dict[str, str], float]] = [
        ("rljob_trainer_time_seconds_total", {"kind": "productive_step"}, 0.95 * up),
        ("rljob_trainer_time_seconds_total", {"kind": "compile"}, 0.05 * up),
        ("rljob_trainer_compile_seconds_total", {"phase": "rollout"}, 0.02 * up),
        ("rljob_trainer_compile_seconds_total", {"phase": "actor_train"}, 0.03 * up),
        ("rljob_trainer_model_flops_total", {"phase": "rollout"}, 0.5e12 * up),
        ("rljob_trainer_model_flops_total", {"phase": "actor_train"}, 1.4e12 * up),
        ("rljob_trainer_phase_duration_seconds_sum", {"phase": "rollout"}, 3.0 * steps),
        ("rljob_trainer_phase_duration_seconds_count", {"phase": "rollout"}, steps),
        ("rljob_trainer_phase_duration_seconds_sum", {"phase": "actor_train"}, 6.0 * steps),
        ("rljob_trainer_phase_duration_seconds_count", {"phase": "actor_train"}, steps),
        ("rljob_trainer_step_duration_seconds_sum", {"compiled": "false"}, 9.5 * steps),
        ("rljob_trainer_step_duration_seconds_count", {"compiled": "false"}, steps),
        ("rljob_trainer_step_duration_seconds_bucket", {"compiled": "false", "le": "5.0"}, 0.0),
        ("rljob_trainer_step_duration_seconds_bucket", {"compiled": "false", "le": "10.0"}, steps),
        ("rljob_trainer_step_duration_seconds_bucket", {"compiled": "false", "le": "+Inf"}, steps),
        ("rljob_trainer_checkpoint_save_duration_seconds_sum", {}, 5.0 * (up // 300)),
        ("rljob_trainer_checkpoint_save_duration_seconds_count", {}, up // 300),
        ("rljob_trainer_tokens_total", {}, 1000.0 * up),
        ("rljob_trainer_packing_padding_tokens_total", {"packed": "true"}, 100.0 * up),
        ("rljob_trainer_packing_capacity_tokens_total", {"packed": "true"}, 1000.0 * up),
        ("rljob_trainer_last_step_timestamp_seconds", {}, 0.0),  # absolute: filled in by the caller
        ("rljob_trainer_global_step", {}, global_step),
        ("rljob_trainer_max_steps", {}, 10000.0),
        ("rljob_trainer_checkpoint_last_step", {}, (global_step // 100) * 100),
        ("rljob_trainer_stall_threshold_seconds", {}, 1800.0),
        ("rljob_trainer_first_step_grace_seconds", {}, 3600.0),
        ("rljob_trainer_step_time_baseline_seconds", {}, 10.0),
        ("rljob_trainer_last_step_duration_seconds", {}, 9.5),
        ("rljob_trainer_reward_mean", {}, 0.5),
        ("rljob_trainer_reward_min", {}, 0.0),
        ("rljob_trainer_reward_max", {}, 1.0),
        ("rljob_trainer_chips", {}, 4.0),
        ("rljob_trainer_peak_flops_per_second_per_chip", {}, 1e12),
        ("rljob_trainer_build_info", {"jax": "0.0"}, 1.0),
    ]
    return out


def _pods(scenario: str, t: float) -> list[tuple[dict[str, str], float]]:
    """(target labels, process start) of the pods serving at ``t``."""
    pods = []
    for process in ("0", "1"):
        base = {"namespace": "ml", "rljob": scenario, "process": process}
        if scenario == "restart" and t >= RESTART_AT:
            if t > RESTART_AT:  # the new pod's first scrape comes one interval after the old pod's last
                pods.append(({**base, "pod": f"restart-{process}-b", "restart_attempt": "1"}, RESTART_AT))
        elif scenario == "restart":
            pods.append(({**base, "pod": f"restart-{process}-a", "restart_attempt": "0"}, 0.0))
        elif scenario == "dup":
            for job in ("a", "b"):
                pods.append(({**base, "pod": f"dup-{process}", "job": job}, 0.0))
        else:
            pods.append(({**base, "pod": f"steady-{process}"}, 0.0))
    return pods


def _operator(scenario: str) -> list[tuple[str, dict[str, str], float]]:
    op = {"namespace": "rljob-system", "rljob_namespace": "ml", "rljob": scenario}
    return [
        ("rljob_operator_rljob_status_phase", {**op, "phase": "Running"}, 1.0),
        ("rljob_operator_rljob_status_phase_timestamp_seconds", {**op, "phase": "Running"}, 60.0),
        ("rljob_operator_rljob_restarts", op, 0.0),
    ]


def samples(start: float) -> Iterator[tuple[str, str, float, float]]:
    """(name, labels, value, timestamp) of every scrape, ``start`` the run's first second (Unix time)."""
    for i in range(MINUTES * 60 // SCRAPE + 1):
        t = float(i * SCRAPE)
        for scenario in SCENARIOS:
            for target, since in _pods(scenario, t):
                for name, extra, value in _trainer(t, since):
                    if name == "rljob_trainer_last_step_timestamp_seconds":
                        value = start + (t // STEP_SECONDS) * STEP_SECONDS
                    yield name, _labels({**target, **extra}), value, start + t
            for name, labels, value in _operator(scenario):
                yield name, _labels(labels), value, start + t
        reconcile = {"namespace": "rljob-system", "handler": "create"}
        yield (
            "rljob_operator_reconcile_duration_seconds_bucket",
            _labels({**reconcile, "le": "0.1"}),
            t,
            start + t,
        )
        yield (
            "rljob_operator_reconcile_duration_seconds_bucket",
            _labels({**reconcile, "le": "+Inf"}),
            t,
            start + t,
        )
        errors = {"namespace": "rljob-system", "kind": "api"}
        yield "rljob_operator_reconcile_errors_total", _labels(errors), t // 60, start + t


def openmetrics(start: float) -> str:
    """The samples as OpenMetrics text: each series' samples together and in time order, ``# EOF``."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for name, labels, value, ts in samples(start):
        series.setdefault((name, labels), []).append((ts, value))
    lines = []
    for (name, labels), points in sorted(series.items()):
        lines += [f"{name}{labels} {value!r} {ts:.3f}" for ts, value in points]
    return "\n".join(lines) + "\n# EOF\n"
