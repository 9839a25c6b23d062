"""Metrics, kopf settings and the command line of the operator."""

from __future__ import annotations

import kopf
import pytest
from prometheus_client import generate_latest
from rljob_operator import metrics as m
from rljob_operator.main import build_parser, options_from
from rljob_operator.settings import ACTIVE_PRIORITY, STANDBY_PRIORITY, OperatorOptions, apply_settings


def test_metric_names_and_phase_gauge():
    om = m.OperatorMetrics()
    om.set_phase("a", "j1", "Running")
    om.set_phase("a", "j2", "Running")
    om.set_phase("b", "j1", "Failed", restarts=2)
    om.set_phase("a", "j2", "Succeeded")
    om.set_phase("b", "j1", None)
    with om.reconcile("create"):
        pass
    with pytest.raises(RuntimeError), om.reconcile("create", lambda e: "api"):
        raise RuntimeError
    text = generate_latest(om.registry).decode()
    assert 'rljob_operator_rljobs{phase="Running"} 1.0' in text
    assert 'rljob_operator_rljobs{phase="Succeeded"} 1.0' in text
    assert 'rljob_operator_rljobs{phase="Failed"} 0.0' in text
    assert 'rljob_operator_reconcile_errors_total{kind="api"} 1.0' in text
    assert 'rljob_operator_reconcile_duration_seconds_count{handler="create"} 2.0' in text
    assert om.tracked() == 2
    # Per RLJob: the current phase only (no stale series for an old phase or a deleted RLJob).
    assert 'rljob_operator_rljob_status_phase{phase="Running",rljob="j1",rljob_namespace="a"} 1.0' in text
    assert 'rljob_operator_rljob_status_phase{phase="Succeeded",rljob="j2",rljob_namespace="a"} 1.0' in text
    assert 'phase="Running",rljob="j2"' not in text and 'rljob_namespace="b"' not in text
    om.set_phase("b", "j3", "Restarting", restarts=4)
    text = generate_latest(om.registry).decode()
    assert 'rljob_operator_rljob_restarts{rljob="j3",rljob_namespace="b"} 4.0' in text


def test_settings_use_the_project_domain():
    s = kopf.OperatorSettings()
    apply_settings(s, OperatorOptions(standby=True))
    assert s.persistence.finalizer == "rljob.dev/finalizer"
    assert s.persistence.progress_storage.prefix == "rljob.dev"
    assert s.posting.enabled
    assert (s.peering.name, s.peering.priority, s.peering.mandatory) == ("rljob", STANDBY_PRIORITY, False)
    assert s.watching.server_timeout and s.watching.client_timeout > s.watching.server_timeout


def test_command_line():
    o = options_from(
        build_parser().parse_args(
            ["-n", "a", "-n", "b", "--metrics-port", "9090", "--liveness", "http://0.0.0.0:8081/healthz"]
        )
    )
    assert o.namespaces == ("a", "b") and not o.all_namespaces and o.metrics_port == 9090
    assert o.priority == ACTIVE_PRIORITY
    assert options_from(build_parser().parse_args([])).all_namespaces
    with pytest.raises(SystemExit):
        build_parser().parse_args(["-n", "a", "-A"])
