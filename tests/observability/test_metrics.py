"""TrainerMetrics fed with StepReports by hand: labels, compile marking, thresholds, the HTTP server.
(The end-to-end scrape of a real training is test_metrics_e2e.py.)"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
from rljob_trainer.telemetry import flops, goodput, metrics_server
from rljob_trainer.telemetry import metrics as m
from rljob_trainer.telemetry.progress import StepRecorder, StepReport

from rljob.api import parse_rljob
from tests import procs
from tests.observability import runs
from tests.observability.runs import value


def report(step: int, seconds: float = 2.0, packed: bool = False) -> StepReport:
    # used_slot_tokens arrived with the packed learner's row accounting; optional so either version works
    extra = {"used_slot_tokens": 100} if "used_slot_tokens" in StepReport.__dataclass_fields__ else {}
    return StepReport(
        step=step,
        max_steps=10,
        seconds=seconds,
        phase_seconds={"rollout": 1.0, "reference": 0.25, "train": 0.5, "weight_sync": 0.25},
        rewards=np.array([0.0, 0.5, 1.0]),
        real_tokens=75,
        slot_tokens=100,
        packed=packed,
        generated_tokens=40,
        sampler_seconds={"prefill": 0.125, "decode": 0.75},
        decode_steps=30,
        **extra,
    )


def samples(metrics: m.TrainerMetrics) -> dict:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in metrics.registry.collect()
        for s in family.samples
    }


def test_steps_phases_tokens_rewards() -> None:
    tm = m.TrainerMetrics(rljob="j", process=1, baseline_seconds=3.0, max_steps=10)
    for step in (1, 2, 3):
        tm(report(step, packed=True))
    s = samples(tm)
    assert value(s, "rljob_trainer_steps_total", rljob="j", process="1") == 3
    assert value(s, "rljob_trainer_step_duration_seconds_count", compiled="true") == 1  # the first step
    assert value(s, "rljob_trainer_step_duration_seconds_count", compiled="false") == 2
    assert value(s, "rljob_trainer_step_duration_seconds_sum") == 6.0
    assert {lb["phase"] for lb in runs.series(s, "rljob_trainer_phase_duration_seconds_count")} == {
        "rollout",
        "ref_inference",
        "actor_train",
        "weight_sync",
    }
    assert value(s, "rljob_trainer_phase_duration_seconds_sum", phase="ref_inference") == 0.75
    assert value(s, "rljob_trainer_packing_capacity_tokens_total", packed="true") == 300
    assert value(s, "rljob_trainer_packing_padding_tokens_total", packed="true") == 75
    assert value(s, "rljob_trainer_tokens_total") == 225
    assert value(s, "rljob_trainer_tokens_per_second") == 37.5
    assert (
        value(s, "rljob_trainer_reward_min"),
        value(s, "rljob_trainer_reward_mean"),
        value(s, "rljob_trainer_reward_max"),
    ) == (0.0, 0.5, 1.0)
    assert value(s, "rljob_trainer_global_step") == 3
    assert value(s, "rljob_trainer_step_time_baseline_seconds") == 3.0


COMPILE = "/jax/core/compile/backend_compile_duration"


def test_a_step_that_compiled_is_labelled() -> None:
    tm = m.TrainerMetrics(rljob="j")
    tm(report(1))
    tm.on_compile(COMPILE, 10.0, 14.0)
    tm.on_compile("/jax/some/other_event", 0.0, 100.0)  # not a compile: ignored
    tm(report(2))
    tm(report(3))
    s = samples(tm)
    assert value(s, "rljob_trainer_step_duration_seconds_count", compiled="true") == 2
    assert value(s, "rljob_trainer_step_duration_seconds_count", compiled="false") == 1
    assert value(s, "rljob_trainer_time_seconds_total", kind="compile") == 4.0


def test_step_histogram_starts_at_zero_for_both_kinds_of_step() -> None:
    """Both children exist before any step: a rate over a window whose steps all landed between two
    scrapes still sees them (the e2e regression alert depends on it)."""
    s = samples(m.TrainerMetrics(rljob="j"))
    for compiled in ("true", "false"):
        assert (
            "rljob_trainer_step_duration_seconds_count",
            frozenset({"rljob": "j", "process": "0", "compiled": compiled}.items()),
        ) in s, compiled


def test_no_baseline_no_series() -> None:
    tm = m.TrainerMetrics(rljob="j", baseline_seconds=None)
    assert not runs.series(samples(tm), "rljob_trainer_step_time_baseline_seconds")


def test_stall_threshold_covers_long_steps_and_checkpoint_pauses() -> None:
    tm = m.TrainerMetrics(rljob="j", stall_threshold_seconds=600, first_step_grace_seconds=900)
    assert value(samples(tm), "rljob_trainer_stall_threshold_seconds") == 600
    assert value(samples(tm), "rljob_trainer_first_step_grace_seconds") == 900
    tm(report(1, seconds=5000))  # the first (compiling) step is the grace's business, not the threshold's
    assert value(samples(tm), "rljob_trainer_stall_threshold_seconds") == 600
    tm(report(2, seconds=400))
    tm.on_checkpoint(2, 150)
    s = samples(tm)
    assert value(s, "rljob_trainer_stall_threshold_seconds") == 2 * 400 + 150
    assert value(s, "rljob_trainer_last_step_duration_seconds") == 400
    assert value(s, "rljob_trainer_checkpoint_last_step") == 2
    assert value(s, "rljob_trainer_checkpoint_save_duration_seconds_count") == 1


def test_throughput_mfu_and_tokens_per_chip() -> None:
    """FLOPs per phase from the step's real tokens; MFU and tokens/s/chip of the last step."""
    f = flops.StepFlops(forward_per_token=100, train_per_token=300, iterations=2, chips=4, peak_per_chip=1e6)
    tm = m.TrainerMetrics(rljob="j", step_flops=f)
    tm(report(1))  # 75 real tokens, 2 s, phases rollout, reference, train, weight_sync
    s = samples(tm)
    assert value(s, "rljob_trainer_model_flops_total", phase="rollout") == 75 * 100
    assert value(s, "rljob_trainer_model_flops_total", phase="ref_inference") == 75 * 100
    assert value(s, "rljob_trainer_model_flops_total", phase="actor_train") == 2 * 75 * 300
    assert "weight_sync" not in {lb["phase"] for lb in runs.series(s, "rljob_trainer_model_flops_total")}
    # (7,500 + 7,500 + 45,000) FLOPs / (2 s x 4 chips x 1e6 FLOP/s) = 60,000 / 8e6
    assert value(s, "rljob_trainer_mfu_ratio") == pytest.approx(0.0075)
    assert value(s, "rljob_trainer_tokens_per_second_per_chip") == 75 / 2 / 4
    assert value(s, "rljob_trainer_rollout_tokens_per_second") == 40 / 1.0  # sampled / rollout seconds
    assert value(s, "rljob_trainer_sampler_seconds_total", part="prefill") == 0.125
    assert value(s, "rljob_trainer_sampler_seconds_total", part="decode") == 0.75
    assert value(s, "rljob_trainer_decode_steps_total") == 30
    tm(report(2))
    s = samples(tm)
    assert value(s, "rljob_trainer_sampler_seconds_total", part="decode") == 1.5  # counters: they add up
    assert value(s, "rljob_trainer_decode_steps_total") == 60
    assert value(s, "rljob_trainer_model_flops_per_token", **{"pass": "train"}) == 300
    assert (
        value(s, "rljob_trainer_chips") == 4
        and value(s, "rljob_trainer_peak_flops_per_second_per_chip") == 1e6
    )


def test_no_peak_no_mfu_series() -> None:
    """Off TPU (no peak) the MFU and peak series are absent, not 0; FLOPs and tokens/s/chip remain."""
    f = flops.StepFlops(forward_per_token=100, train_per_token=300, iterations=1, chips=2, peak_per_chip=None)
    tm = m.TrainerMetrics(rljob="j", step_flops=f)
    tm(report(1))
    s = samples(tm)
    assert not runs.series(s, "rljob_trainer_mfu_ratio")
    assert not runs.series(s, "rljob_trainer_peak_flops_per_second_per_chip")
    assert value(s, "rljob_trainer_tokens_per_second_per_chip") == 75 / 2 / 2


def test_goodput_seconds_by_kind_add_up() -> None:
    """Start-up (process start to the first step, less compiles and the restore), steps split into
    productive, compile and idle, checkpoint pauses: each second in exactly one kind."""
    now = time.time()
    tm = m.TrainerMetrics(rljob="j", process_start=now - 100.0)
    tm.on_compile(COMPILE, now - 90.0, now - 60.0)  # while building the model
    tm.on_resume(4, seconds=20.0)
    tm.on_step_start(5)
    tm.on_compile(COMPILE, now + 1.0, now + 1.5)  # inside the step's phases
    tm(report(5, seconds=3.0))  # phases add up to 2.0 s: 1.0 s outside them is idle
    tm.on_checkpoint(5, 4.0)
    tm.on_step_start(6)  # not the first: no more start-up
    s = samples(tm)
    kind = {k: value(s, "rljob_trainer_time_seconds_total", kind=k) for k in goodput.KINDS}
    assert kind["restart"] == pytest.approx(100.0 - 30.0 - 20.0, abs=1.0) and kind["startup"] == 0
    assert kind["compile"] == 30.5 and kind["checkpoint_restore"] == 20.0 and kind["checkpoint_save"] == 4.0
    assert kind["productive_step"] == 2.0 - 0.5 and kind["rollout_idle"] == 1.0
    assert sum(kind.values()) == pytest.approx(100.0 + 3.0 + 4.0, abs=1.0)


def test_a_fresh_process_counts_startup() -> None:
    tm = m.TrainerMetrics(rljob="j", process_start=time.time() - 10.0)
    tm.on_step_start(1)
    s = samples(tm)
    assert value(s, "rljob_trainer_time_seconds_total", kind="startup") == pytest.approx(10.0, abs=1.0)
    assert value(s, "rljob_trainer_time_seconds_total", kind="restart") == 0


def test_close_servers_after_tunix_cleared_every_jax_listener() -> None:
    """Tunix's MetricsLogger.close() (a run's end) clears every JAX monitoring listener, the compile
    listener the metrics registered included; closing the metrics afterwards must not raise."""
    from tunix.sft.metrics_logger import MetricsLogger

    doc = runs.manifest("cleared", 5, port=procs.free_port())
    tm = metrics_server.start(
        parse_rljob(doc, "test"), 0, StepRecorder(max_steps=5, packed=False), addr="127.0.0.1"
    )
    assert tm is not None
    MetricsLogger().close()
    metrics_server.close_servers()


def test_start_serves_http_and_close_servers_stops_it() -> None:
    port = procs.free_port()
    doc = runs.manifest("served", 5, port=port, baseline=7.0)
    doc["spec"]["metrics"].update(stallThresholdSeconds=60, firstStepGraceSeconds=90)
    job = parse_rljob(doc, "test")
    recorder = StepRecorder(max_steps=5, packed=False)
    tm = metrics_server.start(job, 0, recorder, addr="127.0.0.1")
    try:
        recorder.begin(1)
        recorder.finish()  # the callback is registered on the recorder
        scraped = runs.scrape(port)
        assert scraped is not None
        assert value(scraped, "rljob_trainer_steps_total", rljob="served", process="0") == 1
        assert value(scraped, "rljob_trainer_step_time_baseline_seconds") == 7.0
        assert value(scraped, "rljob_trainer_max_steps") == 5
        # the tiny qwen3 at maxTargetLength 32, on CPU: FLOPs per token, no MFU (no TPU peak)
        assert value(scraped, "rljob_trainer_model_flops_per_token", **{"pass": "forward"}) > 0
        assert not runs.series(scraped, "rljob_trainer_mfu_ratio")
        assert value(scraped, "rljob_trainer_time_seconds_total", kind="startup") > 0
    finally:
        metrics_server.close_servers()
    assert runs.scrape(port, timeout=0.5) is None
    assert not tm._watching


def test_every_tunix_perf_metric_is_mapped_in_the_docs() -> None:
    """docs/throughput.md maps each of Tunix's perf/* step measurements (as the installed Tunix logs
    them) to the rljob series that measures the same interval, or says why there is none."""
    import tunix.perf.export

    names = set(re.findall(r'"(perf/[a-z_/]+)"', Path(tunix.perf.export.__file__).read_text()))
    assert len(names) >= 10, names  # the file still is where Tunix names them
    table = (runs.ROOT / "docs" / "throughput.md").read_text().split("## Tunix's step-phase")[1]
    rows = [line for line in table.splitlines() if line.startswith("| `perf/")]
    mapped = {n for row in rows for n in re.findall(r"`(perf/[a-z_/]+)`", row.split(" | ")[0])}
    assert names <= mapped, f"not in docs/throughput.md: {sorted(names - mapped)}"


def test_compiles_are_counted_by_the_phase_of_the_thread_that_compiled() -> None:
    """``compilations_total`` / ``compile_seconds_total`` by phase: the recorder's phase of the calling
    thread (Tunix's worker thread runs rollout while the main thread trains), startup outside phases."""
    import threading

    from rljob_trainer.telemetry.progress import StepRecorder

    rec = StepRecorder(max_steps=2, packed=True)
    tm = m.TrainerMetrics(rljob="j")
    tm.active_phase = rec.active_phase
    event = COMPILE
    tm.on_compile(event, 0.0, 5.0)  # model set-up: before any phase
    rec.begin(1)
    in_rollout, go_on = threading.Event(), threading.Event()

    def worker() -> None:
        with rec.phase("rollout"):
            in_rollout.set()
            go_on.wait(5)
            tm.on_compile(event, 10.0, 12.0)

    t = threading.Thread(target=worker)
    t.start()
    in_rollout.wait(5)
    with rec.phase("train"):  # the main thread trains while the worker, in rollout, compiles
        go_on.set()
        t.join(5)
        tm.on_compile(event, 20.0, 23.0)
        tm.on_compile(event, 30.0, 31.0)
    s = samples(tm)
    assert value(s, "rljob_trainer_compilations_total", phase="startup") == 1
    assert value(s, "rljob_trainer_compilations_total", phase="rollout") == 1
    assert value(s, "rljob_trainer_compilations_total", phase="actor_train") == 2
    assert value(s, "rljob_trainer_compile_seconds_total", phase="actor_train") == 4.0
    assert value(s, "rljob_trainer_time_seconds_total", kind="compile") == 11.0
    assert rec.active_phase() is None


def test_overlapping_compiles_count_their_wall_time_once() -> None:
    """Two threads compile at once (the train step prewarmed beside the rollout's compile): the compile
    kind counts the union of their spans, so the kinds never exceed the wall time, while the per-phase
    compile seconds count each compile whole; a compile inside another still marks its step compiled."""
    now = time.time()
    tm = m.TrainerMetrics(rljob="j", process_start=now - 10.0)
    tm.on_step_start(1)
    tm.on_compile(COMPILE, now + 3.0, now + 4.0)  # a short one, reported first ...
    tm.on_compile(COMPILE, now + 0.0, now + 10.0)  # ... inside a long one that started earlier
    tm.on_compile(COMPILE, now + 8.0, now + 12.0)  # overlapping the long one's end
    tm(report(1, seconds=13.0))
    tm.on_step_start(2)
    tm(report(2, seconds=2.0))
    tm.on_step_start(3)
    tm.on_compile(COMPILE, now + 20.0, now + 20.5)  # wholly inside nothing: a new compile
    tm(report(3, seconds=2.0))
    s = samples(tm)
    kind = {k: value(s, "rljob_trainer_time_seconds_total", kind=k) for k in goodput.KINDS}
    assert kind["compile"] == pytest.approx(12.5)
    assert value(s, "rljob_trainer_compile_seconds_total", phase="startup") == pytest.approx(15.5)
    assert value(s, "rljob_trainer_step_duration_seconds_count", compiled="true") == 2  # steps 1 and 3
    assert sum(kind.values()) == pytest.approx(10.0 + 13.0 + 2.0 + 2.0, abs=0.5)


def test_a_compile_inside_an_earlier_one_still_marks_its_step() -> None:
    ledger = goodput.Ledger(process_start=0.0)
    ledger.step_started(100.0)
    assert ledger.compiled(100.0, 110.0) == 10.0
    ledger.step_ended(10.0, {"train": 10.0})
    ledger.step_started(110.0)
    assert ledger.compiled(105.0, 109.0) == 0.0  # reported late, inside the first: no new wall time
    compiled, split = ledger.step_ended(1.0, {"train": 1.0})
    assert compiled and split == {"productive_step": 1.0, "rollout_idle": 0.0}


def test_hbm_by_phase_from_the_recorders_memory_probe() -> None:
    """Each phase's end reads the accelerator's (in use, peak): the recorder keeps the largest of a
    step's runs of a phase, the metrics export them by phase; no probe (CPU): no series."""
    tm = m.TrainerMetrics(rljob="j", process=1, baseline_seconds=None, max_steps=10)
    recorder = StepRecorder(max_steps=10, packed=True, callbacks=[tm])
    readings = iter([(5, 9), (7, 12), (6, 12), (4, 20)])
    recorder.memory_probe = lambda: next(readings)
    recorder.begin(1)
    for phase in ("rollout", "reference", "reference", "train"):
        with recorder.phase(phase):
            pass
    r = recorder.finish()
    assert r is not None and r.phase_hbm == {"rollout": (5, 9), "reference": (7, 12), "train": (4, 20)}
    s = samples(tm)
    assert value(s, "rljob_trainer_hbm_bytes_in_use", phase="ref_inference") == 7
    assert value(s, "rljob_trainer_hbm_peak_bytes", phase="actor_train") == 20
    plain = m.TrainerMetrics(rljob="j", process=1, baseline_seconds=None, max_steps=10)
    plain(report(1))
    assert not runs.series(samples(plain), "rljob_trainer_hbm_peak_bytes")
