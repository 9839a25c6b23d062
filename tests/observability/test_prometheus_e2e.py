"""The shipped alert rules on a real Prometheus server scraping a real (tiny, CPU) training run.

The rules file is loaded unchanged; the per-job thresholds come from the RLJob's spec, exported by the
trainer: a step-time baseline far below what a CPU step takes (RLJobStepTimeRegressed fires), and a
5-second stall threshold. The trainer holds its training loop after step HOLD_AT (a test callback standing
in for a hung collective: ``stall_driver.py``), so RLJobTrainingStalled fires, and resolves once the loop
continues. Everything is asserted through Prometheus's HTTP API; every wait is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import procs
from tests.observability import runs
from tests.observability.conftest import RULES
from tests.observability.prom import Prometheus

NAME, NAMESPACE = "prom-e2e", "e2e"
STEPS, HOLD_AT = 24, 16
BASELINE = 0.001
STALL_SECONDS = 5
SEL = f'{{namespace="{NAMESPACE}",rljob="{NAME}"}}'


def _step(prom: Prometheus) -> float:
    result = prom.query(f"max(rljob_trainer_global_step{SEL})")
    return float(result[0]["value"][1]) if result else -1.0


def _mine(alerts: list[dict]) -> list[dict]:
    return [
        a for a in alerts if a["labels"].get("rljob") == NAME and a["labels"].get("namespace") == NAMESPACE
    ]


@pytest.fixture
def trainer_run(tmp_path: Path):
    """The job manifest, the trainer process (started by the test) and its log; the process is ended."""
    port = procs.free_port()
    doc = runs.manifest(NAME, STEPS, port=port, baseline=BASELINE)
    doc["spec"]["metrics"].update(stallThresholdSeconds=STALL_SECONDS, firstStepGraceSeconds=900)
    config = runs.write(tmp_path / "job.yaml", doc)
    log = tmp_path / "trainer.log"
    state: dict = {"port": port, "config": config, "log": log, "release": tmp_path / "release"}
    yield state
    proc = state.get("proc")
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def test_regression_and_stall_fire_and_the_stall_resolves(
    prometheus_bin: Path, tmp_path: Path, trainer_run: dict
) -> None:
    prom = Prometheus(
        prometheus_bin,
        tmp_path,
        procs.free_port(),
        targets=[f"127.0.0.1:{trainer_run['port']}"],
        rule_files=[RULES],
        labels={"namespace": NAMESPACE},
    )
    try:
        with trainer_run["log"].open("w") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.observability.stall_driver",
                    str(trainer_run["config"]),
                    str(HOLD_AT),
                    str(trainer_run["release"]),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=runs.env(RLJOB_METRICS_ADDR="127.0.0.1", RLJOB_METRICS_LINGER_SECONDS="30"),
                cwd=runs.ROOT,
            )
        trainer_run["proc"] = proc
        log = trainer_run["log"]

        def alive() -> None:
            assert proc.poll() is None, f"trainer exited {proc.returncode}:\n{log.read_text()[-3000:]}"

        # 1. Scraped from its start; through the first (compiling) step and the steps that follow,
        #    the stall alert stays quiet: the first-step grace (900 s), not the 5 s threshold, applies.
        prom.wait_for(lambda: prom.query(f"rljob_trainer_build_info{SEL}"), 120, "the first scrape")
        stalled_before_hold = []
        deadline = time.monotonic() + 600
        while "holding after step" not in log.read_text():
            alive()
            stalled_before_hold += _mine(prom.alerts("RLJobTrainingStalled"))
            assert time.monotonic() < deadline, "the trainer never reached the hold"
            time.sleep(0.5)
        assert not stalled_before_hold, stalled_before_hold
        first = prom.query(f'rljob_trainer_step_duration_seconds_sum{{compiled="true",rljob="{NAME}"}}')
        print(f"first step(s) took {float(first[0]['value'][1]):.1f}s")

        # 2. Steady steps far slower than the 1 ms baseline: the regression alert fires.
        regressed = prom.wait_for(lambda: _mine(prom.firing("RLJobStepTimeRegressed")), 60, "regression")
        assert regressed[0]["labels"]["severity"] == "warning"
        assert float(regressed[0]["value"]) > 1.25 * BASELINE
        assert regressed[0]["annotations"]["runbook_url"].endswith("#rljobsteptimeregressed")

        # 3. The loop is held: no step for longer than the threshold. One alert for the RLJob, its
        #    `processes` annotation naming process 0 (the only host here).
        stalled = prom.wait_for(lambda: _mine(prom.firing("RLJobTrainingStalled")), 90, "the stall alert")
        alive()
        assert len(stalled) == 1 and stalled[0]["annotations"]["processes"] == "0", stalled
        assert "processes" not in stalled[0]["labels"]  # the alert's identity is the RLJob only
        assert stalled[0]["labels"]["severity"] == "critical"
        held_at = _step(prom)
        assert held_at == HOLD_AT - 1  # the metrics callback runs after the holding one

        # 4. The hang clears: steps resume and the alert resolves.
        trainer_run["release"].touch()
        prom.wait_for(lambda: _step(prom) > held_at, 300, "steps after the release")  # may recompile first
        prom.wait_for(lambda: not _mine(prom.alerts("RLJobTrainingStalled")), 30, "the stall to resolve")
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        prom.close()
