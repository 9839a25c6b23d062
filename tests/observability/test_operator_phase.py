"""The operator's per-RLJob phase timestamp, which the alert rules read instead of relying on which phase
series still exist (GKE Managed Prometheus shows a vanished series for 5 more minutes)."""

from __future__ import annotations

import time

from prometheus_client import generate_latest
from rljob_operator import metrics as m


def _ts_lines(om: m.OperatorMetrics) -> list[str]:
    text = generate_latest(om.registry).decode()
    return sorted(line for line in text.splitlines() if line.startswith(m.RLJOB_PHASE_TIMESTAMP + "{"))


def test_phase_timestamp_is_when_the_phase_was_first_seen() -> None:
    om = m.OperatorMetrics()
    om.set_phase("a", "j", "Pending", now=100.0)
    om.set_phase("a", "j", "Running", now=200.0)
    om.set_phase("a", "j", "Running", restarts=1, now=300.0)  # same phase again: the time stays
    assert _ts_lines(om) == [
        f'{m.RLJOB_PHASE_TIMESTAMP}{{phase="Running",rljob="j",rljob_namespace="a"}} 200.0'
    ]
    om.set_phase("a", "j", "Failed", now=400.0)
    assert _ts_lines(om) == [
        f'{m.RLJOB_PHASE_TIMESTAMP}{{phase="Failed",rljob="j",rljob_namespace="a"}} 400.0'
    ]


def test_a_recreated_rljob_starts_a_newer_timestamp() -> None:
    """Deleted, then created again under the same name: its phase is newer than the old Failed one (which
    GMP may still show), so the rules read the new one."""
    om = m.OperatorMetrics()
    om.set_phase("a", "j", "Failed", now=400.0)
    om.set_phase("a", "j", None)
    assert _ts_lines(om) == []
    om.set_phase("a", "j", "Pending", now=500.0)
    assert _ts_lines(om) == [
        f'{m.RLJOB_PHASE_TIMESTAMP}{{phase="Pending",rljob="j",rljob_namespace="a"}} 500.0'
    ]


def test_wall_clock_by_default() -> None:
    om = m.OperatorMetrics()
    before = time.time()
    om.set_phase("a", "j", "Running")
    value = float(_ts_lines(om)[0].rsplit(" ", 1)[1])
    assert before <= value <= time.time()
