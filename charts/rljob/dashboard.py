"""The rljob Grafana dashboard, generated from plain dicts (``hack/gen_dashboard.py`` writes the JSON).

It lives in the chart beside what it generates (``files/rljob-dashboard.json``, shipped by
``templates/dashboard.yaml``), not in a Python package: no image carries it (.dockerignore leaves
``charts/`` out) and the chart's package leaves it out (``.helmignore``: ``*.py``). Import it as
``charts.rljob.dashboard`` with the repository root, ``operator/`` and ``trainer/`` on the path.

Why code and not a hand-edited JSON: metric names come from the trainer's ``names.py`` and the operator's ``metrics.py`` constants, and a test checks
the checked-in ``charts/rljob/files/rljob-dashboard.json`` equals ``build()``, so a renamed metric
cannot leave a dead panel behind. Plain dicts rather than grafana-foundation-sdk: a dozen panels do not
justify a dependency.

Trainer panels read ``rljob_trainer.telemetry.names``, operator panels ``rljob_operator.metrics``: this
module is a build-time generator (never imported by a running trainer or operator), so it may name both
components' metrics without making either package import the other.

Sidecar-ready (kube-prometheus-stack loads ConfigMaps labelled ``grafana_dashboard: "1"``): a stable
``uid``, a ``${datasource}`` variable on every panel and query, no ``__inputs``.
"""

from __future__ import annotations

import json
from typing import Any

from rljob_operator import metrics as om
from rljob_trainer.telemetry import names as m

UID = "rljob-trainer"
TITLE = "rljob / GRPO training"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'namespace=~"$namespace", rljob=~"$rljob"'
"""Label selector every query uses (the variables below)."""


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref, "range": True}


def _panel(
    pid: int,
    title: str,
    targets: list[tuple[str, str]],
    grid: tuple[int, int, int, int],
    unit: str,
    description: str,
    kind: str = "timeseries",
    **field_defaults: Any,
) -> dict[str, Any]:
    x, y, w, h = grid
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit, **field_defaults}, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        }
        if kind == "timeseries"
        else {},
        "targets": [_target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)],
    }


BY = "namespace, rljob"
"""Every panel groups by namespace and RLJob: two RLJobs of the same name in two namespaces stay apart."""
J = "{{namespace}}/{{rljob}}"
"""Legend prefix for a series of one RLJob."""
OP_SEL = 'rljob_namespace=~"$namespace", rljob=~"$rljob"'
"""The operator's per-RLJob series name the RLJob's namespace ``rljob_namespace`` (see its metrics.py)."""


def _rate(name: str, by: str = BY, extra: str = "", distinct: str = "") -> str:
    """Rate of a counter summed by ``by``, per process first as the alert rules do: a second scrape of a
    pod collapsed (max by pod), a process's pods in the window added (a restart splits it between them;
    averaging raw series read about half across every restart)."""
    labels = [x.strip() for x in f"{BY}, process, pod, {by}, {distinct}".split(",") if x.strip()]
    key = ", ".join(dict.fromkeys(labels))
    return f"sum by ({by}) (max by ({key}) (rate({name}{{{SEL}{extra}}}[$__rate_interval])))"


def _per_process(name: str, keep: str = "", extra: str = "", distinct: str = "") -> str:
    """``_rate`` per process (and ``keep`` labels): the inner part of an average or max over processes."""
    return _rate(name, f"{BY}, process" + (f", {keep}" if keep else ""), extra, distinct)


def _mean(name_prefix: str, by: str = BY, extra: str = "") -> str:
    """Exact mean of a histogram: rate(_sum) / rate(_count), only where the window holds an observation."""
    return f"{_rate(name_prefix + '_sum', by, extra)}\n/\n({_rate(name_prefix + '_count', by, extra)} > 0)"


def _quantile(q: float, name_prefix: str, extra: str = "") -> str:
    return f"histogram_quantile({q}, {_rate(name_prefix + '_bucket', f'{BY}, le', extra)})"


def _variables() -> list[dict[str, Any]]:
    def query_var(name: str, query: str) -> dict[str, Any]:
        return {
            "name": name,
            "label": name,
            "type": "query",
            "datasource": DS,
            "query": {"query": query, "refId": f"{name}-var"},
            "definition": query,
            "refresh": 2,
            "includeAll": True,
            "allValue": ".*",
            "multi": True,
            "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        }

    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
            "regex": "",
        },
        query_var("namespace", f"label_values({m.BUILD_INFO}, namespace)"),
        query_var("rljob", f'label_values({m.BUILD_INFO}{{namespace=~"$namespace"}}, rljob)'),
    ]


def _trainer_panels() -> list[dict[str, Any]]:
    step, phase = m.STEP_DURATION, m.PHASE_DURATION
    steady = ', compiled="false"'
    return [
        _panel(
            1,
            "Step time (steady steps)",
            [
                (
                    f"{_mean(step, extra=steady)}\nor on ({BY})\n"
                    f"max by ({BY}) ({m.LAST_STEP_DURATION}{{{SEL}}})",
                    f"{J} mean",
                ),
                (_quantile(0.5, step, steady), f"{J} p50"),
                (_quantile(0.9, step, steady), f"{J} p90"),
                (_quantile(0.99, step, steady), f"{J} p99"),
                (f"max by ({BY}) ({m.STEP_TIME_BASELINE}{{{SEL}}})", f"{J} baseline"),
            ],
            (0, 0, 12, 8),
            "s",
            "Mean is exact (rate of _sum / rate of _count) over steady steps; when a step is longer than "
            "the rate window, the last step's duration is shown instead of a gap. Quantiles are accurate "
            "to one bucket. The regression alert fires at 1.25x the baseline.",
        ),
        _panel(
            2,
            "Phase time per step",
            [(_mean(phase, f"{BY}, phase"), f"{J} {{{{phase}}}}")],
            (12, 0, 12, 8),
            "s",
            "Mean seconds per global step spent in rollout, ref_inference, old_logps, "
            "actor_train and weight_sync.",
            custom={"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30},
        ),
        _panel(
            3,
            "Reward",
            [
                (f"avg by ({BY}) ({m.REWARD_MEAN}{{{SEL}}})", f"{J} mean"),
                (f"min by ({BY}) ({m.REWARD_MIN}{{{SEL}}})", f"{J} min"),
                (f"max by ({BY}) ({m.REWARD_MAX}{{{SEL}}})", f"{J} max"),
            ],
            (0, 8, 12, 8),
            "none",
            "Reward of the last step's completions (mean, min, max).",
        ),
        _panel(
            4,
            "Token utilization (packing)",
            [
                (
                    f"1 - {_rate(m.PADDING_TOKENS, f'{BY}, packed')}\n/\n{_rate(m.CAPACITY_TOKENS, f'{BY}, packed')}",
                    f"{J} packed={{{{packed}}}}",
                ),
            ],
            (12, 8, 12, 8),
            "percentunit",
            "Share of the token slots the actor computed over that held real "
            "tokens. The padding alert fires when packed rows are more than 25% padding.",
            min=0,
            max=1,
        ),
        _panel(
            5,
            "Seconds since last step, per host",
            [
                (
                    f"min by ({BY}, process) (time() - {m.LAST_STEP_TIMESTAMP}{{{SEL}}})",
                    f"{J} process {{{{process}}}}",
                ),
                (f"max by ({BY}) ({m.STALL_THRESHOLD}{{{SEL}}})", f"{J} stall threshold"),
                (f"max by ({BY}) ({m.FIRST_STEP_GRACE}{{{SEL}}})", f"{J} first-step grace"),
            ],
            (0, 16, 12, 8),
            "s",
            "One line per trainer process (its freshest series: a replaced pod's old one does not count): "
            "a single stuck host stands out. The stall alert fires above the threshold line (above the "
            "grace line while a process has not completed its first step).",
        ),
        _panel(
            6,
            "Global step, per host",
            [
                (f"max by ({BY}, process) ({m.GLOBAL_STEP}{{{SEL}}})", f"{J} process {{{{process}}}}"),
                (f"max by ({BY}) ({m.MAX_STEPS}{{{SEL}}})", f"{J} max steps"),
                (f"max by ({BY}) ({m.CHECKPOINT_LAST_STEP}{{{SEL}}})", f"{J} last checkpoint"),
            ],
            (12, 16, 12, 8),
            "none",
            "Last completed global step of every process, the target, and the "
            "step of the last checkpoint (what a restart resumes from).",
        ),
        _panel(
            7,
            "Tokens per second",
            [(f"max by ({BY}) ({_per_process(m.TOKENS)})", J)],
            (0, 24, 12, 8),
            "short",
            "Real (prompt + completion) tokens trained on per second.",
        ),
        _panel(
            8,
            "Checkpoint saves and compiles",
            [
                (_mean(m.CHECKPOINT_SAVE_DURATION), f"{J} checkpoint save"),
                (
                    f"max by ({BY}, phase) ({_per_process(m.COMPILE_SECONDS, 'phase')})",
                    f"{J} {{{{phase}}}} compile seconds/s",
                ),
            ],
            (12, 24, 12, 8),
            "s",
            "Mean pause to save a checkpoint, and XLA compile time per second by the phase that compiled "
            "(startup: model set-up); a warm persistent compilation cache keeps it near 0 after a restart.",
        ),
    ]


def _throughput_panels() -> list[dict[str, Any]]:
    """MFU, tokens per second per chip, goodput and badput (trainer/rljob_trainer/telemetry/flops.py, goodput.py)."""
    capacity = f"max by ({BY}) ({m.CHIPS}{{{SEL}}} * {m.PEAK_FLOPS}{{{SEL}}})"
    train = 'phase="actor_train"'
    return [
        _panel(
            12,
            "MFU",
            [
                (
                    f"max by ({BY}) ({_per_process(m.MODEL_FLOPS, distinct='phase')})\n/ on ({BY})\n{capacity}",
                    f"{J} step",
                ),
                (
                    f"max by ({BY}) ({_per_process(m.MODEL_FLOPS, extra=', ' + train)})\n/ on ({BY})\n"
                    f"(max by ({BY}) ({_per_process(m.PHASE_DURATION + '_sum', extra=', ' + train)}) > 0)"
                    f"\n/ on ({BY})\n{capacity}",
                    f"{J} actor_train phase",
                ),
            ],
            (0, 40, 8, 8),
            "percentunit",
            "Model FLOPs (6N + 12LHQT per trained token, 2N + 4LHQT per rollout/log-prob token; see "
            "trainer/rljob_trainer/telemetry/flops.py) per second over chips x the generation's bf16 peak. step: all "
            "of each step's wall time (the rollout decodes, so it is low); actor_train: the update phase "
            "alone. Empty off TPU (no peak).",
            min=0,
        ),
        _panel(
            13,
            "Tokens per second per chip",
            [
                (
                    f"max by ({BY}) ({_per_process(m.TOKENS)})\n/ on ({BY})\nmax by ({BY}) ({m.CHIPS}{{{SEL}}})",
                    J,
                )
            ],
            (8, 40, 8, 8),
            "short",
            "Real (prompt + completion) tokens trained on per second, divided by the job's chips.",
        ),
        _panel(
            14,
            "Goodput and badput (share of wall time)",
            [
                (
                    f"avg by ({BY}, kind) ({_per_process(m.TIME_SECONDS, 'kind')})",
                    f"{J} {{{{kind}}}}",
                )
            ],
            (16, 40, 8, 8),
            "percentunit",
            "Seconds per second of each kind, per process (its pods added) then averaged: productive_step is the goodput; compile, "
            "rollout_idle (host work while the accelerators wait), checkpoint_save/restore, startup and "
            "restart are badput. A stack below 100% is time with no trainer running (rescheduling).",
            custom={"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30},
            min=0,
            max=1,
        ),
    ]


def _operator_panels() -> list[dict[str, Any]]:
    """The operator's view: RLJob phases and restarts, reconcile latency and errors."""
    dur = om.RECONCILE_DURATION
    ts = f"{om.RLJOB_PHASE_TIMESTAMP}{{{OP_SEL}}}"
    return [
        _panel(
            9,
            "RLJob phase (operator)",
            [
                (
                    f"max by (rljob_namespace, rljob, phase) (\n  {ts}\n  == on (rljob_namespace, rljob) group_left ()\n"
                    f"  max by (rljob_namespace, rljob) ({ts})\n) * 0 + 1",
                    "{{rljob_namespace}}/{{rljob}} {{phase}}",
                )
            ],
            (0, 32, 8, 8),
            "none",
            "The phase the operator last saw on each RLJob's status (value 1 while in that phase): the "
            "phase it saw most recently (GKE Managed Prometheus shows a previous phase 5 minutes longer).",
            kind="state-timeline",
        ),
        _panel(
            10,
            "RLJob restarts (operator)",
            [
                (
                    f"max by (rljob_namespace, rljob) ({om.RLJOB_RESTARTS}{{{OP_SEL}}})",
                    "{{rljob_namespace}}/{{rljob}}",
                )
            ],
            (8, 32, 8, 8),
            "none",
            "status.restarts: JobSet restarts of all slices (preemption included). RLJobRestartingOften "
            "fires at 3 within an hour.",
        ),
        _panel(
            11,
            "Operator reconciles",
            [
                (
                    f"histogram_quantile(0.9, sum by (le, handler) (rate({dur}_bucket[$__rate_interval])))",
                    "p90 {{handler}}",
                ),
                (f"sum by (kind) (rate({om.RECONCILE_ERRORS}[$__rate_interval]))", "errors/s {{kind}}"),
            ],
            (16, 32, 8, 8),
            "s",
            "Reconcile latency per handler (p90) and reconcile errors per second by kind (conflicts are "
            "normal retries).",
        ),
    ]


def _annotations() -> list[dict[str, Any]]:
    """Firing rljob alerts drawn on every time panel (Prometheus's ALERTS series)."""
    return [
        {
            "name": "rljob alerts",
            "datasource": DS,
            "enable": True,
            "iconColor": "red",
            "expr": 'ALERTS{alertname=~"RLJob.*", alertstate="firing", namespace=~"$namespace"}',
            "step": "60s",
            "titleFormat": "{{alertname}}",
            "textFormat": "{{namespace}}/{{rljob}} {{severity}}",
            "useValueForTime": False,
        }
    ]


def build() -> dict[str, Any]:
    """The dashboard model, deterministic (the checked-in JSON is compared with it)."""
    return {
        "uid": UID,
        "title": TITLE,
        "description": "GRPO training with rljob: step time, phases, rewards, packing, per-host liveness.",
        "tags": ["rljob", "training"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "templating": {"list": _variables()},
        "annotations": {"list": _annotations()},
        "links": [],
        "panels": _trainer_panels() + _operator_panels() + _throughput_panels(),
    }


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"
