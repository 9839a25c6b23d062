"""A short real training (tiny model, CPU) with the metrics port open, scraped over HTTP during and after.

Checks what the alerts and the dashboard rely on: the step counter equals the steps run, the step
histogram counts every step (compiled ones labelled), the baseline gauge is the RLJob's value, and the
per-step series (phases, tokens, rewards, last-step timestamp) move with the steps.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests import procs
from tests.observability import runs
from tests.observability.runs import value

STEPS = 6
BASELINE = 2.5


@pytest.mark.slow
def test_metrics_during_and_after_a_real_run(tmp_path: Path) -> None:
    port = procs.free_port()
    config = runs.write(
        tmp_path / "rljob.yaml", runs.manifest("metrics-e2e", STEPS, port=port, baseline=BASELINE)
    )
    started = time.time()
    proc = runs.start(config, RLJOB_METRICS_LINGER_SECONDS="5")
    during: list[dict] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            samples = runs.scrape(port, timeout=1.0)
            if samples:
                during.append(samples)
            time.sleep(0.2)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    lines: list[str] = []
    try:
        assert runs.wait_for_line(proc, "done:", lines, timeout=240), "".join(lines)
        stop.set()
        poller.join()
        after = runs.scrape(port)
    finally:
        stop.set()
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, "".join(lines) + out
    assert after is not None, "metrics endpoint gone before the linger period ended"

    # During: served before the first step completed (a long compile is visible), and never ahead of it.
    assert during, "never scraped while training"
    early = during[0]
    assert value(early, "rljob_trainer_steps_total") < STEPS
    assert value(early, "rljob_trainer_build_info") == 1
    assert value(early, "rljob_trainer_step_time_baseline_seconds") == BASELINE
    for snap in during:
        steps = value(snap, "rljob_trainer_steps_total")
        assert value(snap, "rljob_trainer_step_duration_seconds_count") >= steps
        assert value(snap, "rljob_trainer_global_step") >= steps

    # After: exact counts.
    labels = {"rljob": "metrics-e2e", "process": "0"}
    assert value(after, "rljob_trainer_steps_total", **labels) == STEPS
    assert value(after, "rljob_trainer_step_duration_seconds_count", **labels) == STEPS
    assert value(after, "rljob_trainer_step_duration_seconds_count", compiled="true") >= 1  # the first step
    assert value(after, "rljob_trainer_step_duration_seconds_bucket", le="+Inf") == STEPS
    assert value(after, "rljob_trainer_step_time_baseline_seconds", **labels) == BASELINE
    assert value(after, "rljob_trainer_global_step", **labels) == STEPS
    assert value(after, "rljob_trainer_max_steps", **labels) == STEPS
    for phase in ("rollout", "ref_inference", "actor_train"):
        assert value(after, "rljob_trainer_phase_duration_seconds_count", phase=phase) == STEPS, phase
    capacity = value(after, "rljob_trainer_packing_capacity_tokens_total")
    padding = value(after, "rljob_trainer_packing_padding_tokens_total")
    tokens = value(after, "rljob_trainer_tokens_total")
    assert capacity > 0 and capacity == padding + tokens
    assert value(after, "rljob_trainer_tokens_per_second") > 0
    assert value(after, "rljob_trainer_rollout_tokens_per_second") > 0
    # the sampler's programs, timed through Tunix's rollout (decode.install in tunix_bridge.build)
    assert value(after, "rljob_trainer_sampler_seconds_total", part="prefill") > 0
    assert value(after, "rljob_trainer_sampler_seconds_total", part="decode") > 0
    assert value(after, "rljob_trainer_decode_steps_total") >= STEPS
    lo, mean, hi = (value(after, f"rljob_trainer_reward_{k}") for k in ("min", "mean", "max"))
    assert 0 <= lo <= mean <= hi <= 1
    assert started <= value(after, "rljob_trainer_last_step_timestamp_seconds") <= time.time()
    assert value(after, "rljob_trainer_stall_threshold_seconds") >= 1800
    info = runs.series(after, "rljob_trainer_build_info")[0]
    import jax

    assert info["jax"] == jax.__version__ and info["tunix"] != "none" and info["libtpu"] == "none"

    # Throughput and goodput (docs/throughput.md): FLOPs of every pass that ran, tokens per chip, no MFU on
    # CPU; the wall time by kind covers the run (start-up, compiles, steps) and never exceeds it.
    fwd = value(after, "rljob_trainer_model_flops_per_token", **{"pass": "forward"})
    assert value(after, "rljob_trainer_model_flops_per_token", **{"pass": "train"}) == 3 * fwd
    assert value(after, "rljob_trainer_model_flops_total", phase="actor_train") == 3 * fwd * tokens
    assert value(after, "rljob_trainer_model_flops_total", phase="rollout") == fwd * tokens
    assert value(after, "rljob_trainer_tokens_per_second_per_chip") > 0
    assert not runs.series(after, "rljob_trainer_mfu_ratio")  # a CPU backend: no peak, no MFU
    kind = {
        k: value(after, "rljob_trainer_time_seconds_total", kind=k)
        for k in ("productive_step", "compile", "rollout_idle", "startup", "restart", "checkpoint_save")
    }
    assert (
        kind["productive_step"] > 0 and kind["compile"] > 0 and kind["startup"] > 0 and kind["restart"] == 0
    )
    # Compiles by the phase that ran them (the worker thread's rollout, the main thread's train step).
    by_phase = {
        p: value(after, "rljob_trainer_compilations_total", phase=p) for p in ("rollout", "actor_train")
    }
    assert all(n >= 1 for n in by_phase.values()), by_phase
    seconds = sum(v for (n, _), v in after.items() if n == "rljob_trainer_compile_seconds_total")
    # Each compile whole by phase; the compile kind counts overlapping compiles' wall time once.
    assert seconds >= kind["compile"] * (1 - 1e-6) > 0
    assert (
        sum(kind.values()) <= time.time() - started + 5
    )  # the process started after `started`, +import skew
