"""The rljob Grafana dashboard, generated from plain dicts (``hack/gen_dashboard.py`` writes the JSON).

Why code and not a hand-edited JSON: metric names come from ``metrics.py`` constants, and a test checks
the checked-in ``charts/rljob/files/rljob-dashboard.json`` equals ``build()``, so a renamed metric
cannot leave a dead panel behind. Plain dicts rather than grafana-foundation-sdk: a dozen panels do not
justify a dependency in the trainer image.

Sidecar-ready (kube-prometheus-stack loads ConfigMaps labelled ``grafana_dashboard: "1"``): a stable
``uid``, a ``${datasource}`` variable on every panel and query, no ``__inputs``.
"""

from __future__ import annotations

import json
from typing import Any

from rljob_trainer import metrics as m

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


def _mean(name_prefix: str, by: str, extra: str = "") -> str:
    """Exact mean of a histogram: rate(_sum) / rate(_count)."""
    sel = f"{{{SEL}{extra}}}"
    return (
        f"sum by ({by}) (rate({name_prefix}_sum{sel}[$__rate_interval]))\n/\n"
        f"sum by ({by}) (rate({name_prefix}_count{sel}[$__rate_interval]))"
    )


def _quantile(q: float, name_prefix: str, extra: str = "") -> str:
    return (
        f"histogram_quantile({q}, sum by (le, rljob) "
        f"(rate({name_prefix}_bucket{{{SEL}{extra}}}[$__rate_interval])))"
    )


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


def _panels() -> list[dict[str, Any]]:
    step, phase = m.STEP_DURATION, m.PHASE_DURATION
    steady = ', compiled="false"'
    return [
        _panel(
            1,
            "Step time (steady steps)",
            [
                (_mean(step, "rljob", steady), "{{rljob}} mean"),
                (_quantile(0.5, step, steady), "{{rljob}} p50"),
                (_quantile(0.9, step, steady), "{{rljob}} p90"),
                (_quantile(0.99, step, steady), "{{rljob}} p99"),
                (f"max by (rljob) ({m.STEP_TIME_BASELINE}{{{SEL}}})", "{{rljob}} baseline"),
            ],
            (0, 0, 12, 8),
            "s",
            "Mean is exact (rate of _sum / rate of _count); quantiles are accurate to one "
            "bucket. Steps that compiled are excluded. The regression alert fires at 1.25x the baseline.",
        ),
        _panel(
            2,
            "Phase time per step",
            [
                (_mean(phase, "rljob, phase"), "{{rljob}} {{phase}}"),
            ],
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
                (f"avg by (rljob) ({m.REWARD_MEAN}{{{SEL}}})", "{{rljob}} mean"),
                (f"min by (rljob) ({m.REWARD_MIN}{{{SEL}}})", "{{rljob}} min"),
                (f"max by (rljob) ({m.REWARD_MAX}{{{SEL}}})", "{{rljob}} max"),
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
                    f"1 - sum by (rljob, packed) (rate({m.PADDING_TOKENS}{{{SEL}}}[$__rate_interval]))\n/\n"
                    f"sum by (rljob, packed) (rate({m.CAPACITY_TOKENS}{{{SEL}}}[$__rate_interval]))",
                    "{{rljob}} packed={{packed}}",
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
                (f"time() - {m.LAST_STEP_TIMESTAMP}{{{SEL}}}", "{{rljob}} process {{process}}"),
                (f"max by (rljob) ({m.STALL_THRESHOLD}{{{SEL}}})", "{{rljob}} stall threshold"),
            ],
            (0, 16, 12, 8),
            "s",
            "One line per trainer process: a single stuck host stands out. The stall "
            "alert fires above the threshold line.",
        ),
        _panel(
            6,
            "Global step, per host",
            [
                (f"{m.GLOBAL_STEP}{{{SEL}}}", "{{rljob}} process {{process}}"),
                (f"max by (rljob) ({m.MAX_STEPS}{{{SEL}}})", "{{rljob}} max steps"),
                (f"max by (rljob) ({m.CHECKPOINT_LAST_STEP}{{{SEL}}})", "{{rljob}} last checkpoint"),
            ],
            (12, 16, 12, 8),
            "none",
            "Last completed global step of every process, the target, and the "
            "step of the last checkpoint (what a restart resumes from).",
        ),
        _panel(
            7,
            "Tokens per second",
            [
                (f"max by (rljob) (rate({m.TOKENS}{{{SEL}}}[$__rate_interval]))", "{{rljob}}"),
            ],
            (0, 24, 12, 8),
            "short",
            "Real (prompt + completion) tokens trained on per second.",
        ),
        _panel(
            8,
            "Checkpoint saves and compiles",
            [
                (_mean(m.CHECKPOINT_SAVE_DURATION, "rljob"), "{{rljob}} checkpoint save"),
                (
                    f"max by (rljob) (rate({m.COMPILE_SECONDS}{{{SEL}}}[$__rate_interval]))",
                    "{{rljob}} compile seconds/s",
                ),
            ],
            (12, 24, 12, 8),
            "s",
            "Mean pause to save a checkpoint, and XLA compile time per second.",
        ),
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
        "annotations": {"list": []},
        "links": [],
        "panels": _panels(),
    }


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"
