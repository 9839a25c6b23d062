"""The console: a bar with ETA on a terminal, plain lines in logs, "compiling" while XLA compiles, and no
"Skipping non-TPU device" warning on CPU. Fast: no JAX (compile events are fed to the listeners)."""

from __future__ import annotations

import io
import logging
import time
import types

import numpy as np
from rljob_trainer.run.main import _configure_logging
from rljob_trainer.telemetry import console
from rljob_trainer.telemetry.progress import StepReport

EVENT = console.COMPILE_EVENT


def report(step: int, seconds: float = 0.5, max_steps: int = 10) -> StepReport:
    return StepReport(step, max_steps, seconds, {"rollout": 0.1}, np.full(4, 0.25), 100, 128, 128, False)


def test_eta_ignores_steps_that_compiled() -> None:
    reports = [report(1, 30.0), report(2, 1.0), report(3, 1.0)]
    assert console.eta_seconds(reports, [True, False, False]) == 7 * 1.0


def test_plain_lines_say_compiling_once_per_step() -> None:
    out, watch = io.StringIO(), console.CompileWatch()
    plain = console.PlainProgress(out, watch)
    plain.on_step_start(1)
    watch._scalar(EVENT, time.time())
    watch._scalar(EVENT, time.time())  # a second program in the same step: no second line
    watch._duration(EVENT, 2.0)
    plain(report(1))
    plain.on_step_start(2)
    watch._scalar(EVENT, time.time())
    lines = out.getvalue().splitlines()
    assert lines[0] == "step 1: compiling the model (first step) (XLA)..."
    assert lines[1].startswith("step    1/10  reward 0.250")
    assert lines[2] == "step 2: compiling a new shape (XLA)..."


def test_bar_shows_progress_eta_and_a_running_compile() -> None:
    out, watch = io.StringIO(), console.CompileWatch()
    bar = console.ProgressBar(out, watch, max_steps=10)
    try:
        bar.on_step_start(1)
        bar(report(1, 30.0))
        bar.on_step_start(2)
        bar(report(2, 1.0))
        watch._scalar(EVENT, time.time())
        watch.started -= 5  # the compile has run 5 s
        line = bar._line()
    finally:
        bar.close()
    assert line.startswith("step 3/10 [#####")
    assert "reward 0.250" in line and "ETA 0:08" in line and "compiling (XLA) 5s..." in line
    assert "\r\x1b[K" in out.getvalue()


def test_cpu_runs_do_not_warn_about_missing_tpus(caplog) -> None:
    _configure_logging()
    logging.getLogger("absl").warning("Skipping non-TPU device: %s. You might be missing jax[tpu]", "cpu")
    logging.getLogger("absl").warning("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]


def test_resharding_onto_one_device_is_quiet_but_onto_many_is_kept(caplog) -> None:
    _configure_logging()
    absl = logging.getLogger("absl")
    one, eight = types.SimpleNamespace(size=1), types.SimpleNamespace(size=8)
    absl.warning("Resharding model from %s to %s", None, one)  # RLCluster placing a fresh CPU model
    absl.warning("Resharding model from %s to %s", None, eight)  # moves real weights: worth a line
    absl.warning("Resharding model from %s to %s", one, one)
    assert [r.args[1].size for r in caplog.records] == [8, 1]
