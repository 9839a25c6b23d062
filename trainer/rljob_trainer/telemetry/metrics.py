"""The trainer's Prometheus metrics: the registry and what updates it. The names are ``names.py``'s (one
module, which the alert rules and the dashboard also read; a test checks all three agree).

Every series carries
``rljob`` (the RLJob's name) and ``process`` (the JAX process index): every host serves its own
``/metrics``, so a single stuck host shows up as one stale ``last_step_timestamp``.

Steps that compiled (the first step of a process, and any step during which XLA compiled something,
e.g. a new packed-row bucket) are labelled ``compiled="true"`` in the step histogram, so the mean that
the regression alert compares with the baseline uses ``compiled="false"`` steps only.

Throughput and goodput (``flops.py`` and ``goodput.py`` hold the arithmetic and the bookkeeping and say
what is counted; this module only names the series and counts what they return):
model FLOPs per phase, MFU of the last step against the chip's peak (exported only on a TPU backend: a
CPU run has no peak to compare with, so the series is absent rather than a made-up number), real tokens
per second per chip, and the process's wall time by kind (``rljob_trainer_time_seconds_total{kind}``;
goodput is the rate of ``kind="productive_step"``). Serving (``/metrics`` over HTTP) is
``metrics_server.py``.

No JAX import at module level: building the registry is cheap and works in tests without JAX.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import math
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rljob_trainer.telemetry import goodput, names
from rljob_trainer.telemetry.flops import StepFlops
from rljob_trainer.telemetry.progress import StepReport


def versions() -> dict[str, str]:
    """Versions for the build-info series ("none" for a package that is not installed, e.g. libtpu on CPU)."""

    def version(*dists: str) -> str:
        for dist in dists:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return "none"

    return {
        "jax": version("jax"),
        "jaxlib": version("jaxlib"),
        "tunix": version("google-tunix"),
        "libtpu": version("libtpu", "libtpu-nightly"),
        "version": version("rljob"),
    }


class TrainerMetrics:
    """All trainer metrics in an explicit registry, updated by calling the object with each StepReport.

    ``baseline_seconds`` is ``spec.metrics.stepTimeBaselineSeconds``: when unset the baseline series is
    not exported at all, so the regression alert (a join on it) stays silent instead of comparing to 0.
    ``stall_threshold_seconds`` and ``first_step_grace_seconds`` come from the spec too: the stall alert
    compares the time since the last step with the grace until this process completed a step, and with
    the threshold after that, so a long first compile does not page.
    """

    def __init__(
        self,
        rljob: str = "",
        process: int = 0,
        baseline_seconds: float | None = None,
        max_steps: int = 0,
        stall_threshold_seconds: float = names.DEFAULT_STALL_THRESHOLD_SECONDS,
        first_step_grace_seconds: float = names.DEFAULT_FIRST_STEP_GRACE_SECONDS,
        step_flops: StepFlops | None = None,
        process_start: float | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        base = ["rljob", "process"]
        self._labels = {"rljob": rljob, "process": str(process)}
        self.step_duration = Histogram(
            names.STEP_DURATION,
            "Wall time of one global step (rollout to weight sync); compiled=true when XLA "
            "compiled during the step.",
            [*base, "compiled"],
            buckets=names.STEP_BUCKETS,
            registry=r,
        )
        self.phase_duration = Histogram(
            names.PHASE_DURATION,
            "Wall time of one phase of a global step.",
            [*base, "phase"],
            buckets=names.STEP_BUCKETS,
            registry=r,
        )
        self.steps = Counter(
            names.STEPS, "Global steps completed by this process since it started.", base, registry=r
        )
        self.global_step = Gauge(
            names.GLOBAL_STEP, "Last completed global step (continues across resumes).", base, registry=r
        )
        self.max_steps = Gauge(names.MAX_STEPS, "spec.grpo.maxSteps.", base, registry=r)
        self.last_step = Gauge(
            names.LAST_STEP_TIMESTAMP,
            "Unix time the last global step completed (the "
            "process start time until the first step completes).",
            base,
            registry=r,
        )
        self.baseline = Gauge(
            names.STEP_TIME_BASELINE,
            "spec.metrics.stepTimeBaselineSeconds (expected seconds per global step); absent when unset.",
            base,
            registry=r,
        )
        self.stall_threshold = Gauge(
            names.STALL_THRESHOLD,
            "Seconds without a step after which training counts as stalled: "
            "spec.metrics.stallThresholdSeconds or twice the longest steady step plus the longest "
            "checkpoint save seen, whichever is larger.",
            base,
            registry=r,
        )
        self.first_step_grace = Gauge(
            names.FIRST_STEP_GRACE,
            "spec.metrics.firstStepGraceSeconds: how long this process may take for its first step "
            "(compiles) before it counts as stalled.",
            base,
            registry=r,
        )
        self.last_step_duration = Gauge(
            names.LAST_STEP_DURATION,
            "Wall time of the last global step (shown where a rate window holds no step).",
            base,
            registry=r,
        )
        self.capacity_tokens = Counter(
            names.CAPACITY_TOKENS,
            "Token slots the actor computed over (rows x row length).",
            [*base, "packed"],
            registry=r,
        )
        self.padding_tokens = Counter(
            names.PADDING_TOKENS,
            "Token slots that held padding, not real tokens.",
            [*base, "packed"],
            registry=r,
        )
        self.tokens = Counter(
            names.TOKENS, "Real (prompt + completion) tokens the actor trained on.", base, registry=r
        )
        self.tokens_per_second = Gauge(
            names.TOKENS_PER_SECOND, "Real tokens trained on per second of the last step.", base, registry=r
        )
        self.rollout_tokens = Gauge(
            names.ROLLOUT_TOKENS_PER_SECOND,
            "Completion tokens sampled / rollout seconds, last step.",
            base,
            registry=r,
        )
        self.sampler_seconds = Counter(
            names.SAMPLER_SECONDS,
            "Seconds the JAX sampler's programs ran (until their results were ready), by part: prefill, decode.",
            [*base, "part"],
            registry=r,
        )
        self.decode_steps = Counter(
            names.DECODE_STEPS,
            "Decode loop iterations of the JAX sampler (one token for every sequence of a call each); "
            "rate(sampler_seconds_total{part='decode'}) / rate(this) is the time of one.",
            base,
            registry=r,
        )
        self.reward_mean = Gauge(
            names.REWARD_MEAN, "Mean reward of the last step's completions.", base, registry=r
        )
        self.reward_min = Gauge(
            names.REWARD_MIN, "Minimum reward of the last step's completions.", base, registry=r
        )
        self.reward_max = Gauge(
            names.REWARD_MAX, "Maximum reward of the last step's completions.", base, registry=r
        )
        self.checkpoint_save = Histogram(
            names.CHECKPOINT_SAVE_DURATION,
            "Wall time the training loop paused to save a checkpoint.",
            base,
            buckets=names.STEP_BUCKETS,
            registry=r,
        )
        self.checkpoint_last_step = Gauge(
            names.CHECKPOINT_LAST_STEP, "Global step of the last saved checkpoint.", base, registry=r
        )
        self.resumed_step = Gauge(
            names.RESUMED_STEP, "Global step this process resumed from (0: fresh start).", base, registry=r
        )
        self.build_info = Gauge(
            names.BUILD_INFO, "Versions of the trainer's stack (value 1).", [*base, *versions()], registry=r
        )
        self._init_throughput(base, step_flops)

        lb = self._labels
        self.build_info.labels(**lb, **versions()).set(1)
        self.steps.labels(**lb)
        for compiled in ("true", "false"):  # from 0, so a rate sees steps that land between two scrapes
            self.step_duration.labels(**lb, compiled=compiled)
        self.global_step.labels(**lb).set(0)
        self.max_steps.labels(**lb).set(max_steps)
        self.last_step.labels(**lb).set(time.time())
        self.resumed_step.labels(**lb).set(0)
        if baseline_seconds is not None:
            self.baseline.labels(**lb).set(baseline_seconds)
        self.first_step_grace.labels(**lb).set(first_step_grace_seconds)
        self._min_stall = stall_threshold_seconds
        self._longest_step = 0.0
        self._longest_save = 0.0
        self.stall_threshold.labels(**lb).set(stall_threshold_seconds)
        self._ledger = goodput.Ledger(process_start if process_start is not None else time.time())

    def _init_throughput(self, base: list[str], step_flops: StepFlops | None) -> None:
        """The throughput and goodput series (see flops.py and goodput.py for what they count)."""
        r, lb, self._flops = self.registry, self._labels, step_flops
        self.flops_per_token = Gauge(
            names.MODEL_FLOPS_PER_TOKEN,
            "Model FLOPs of one token: pass=forward 2N + 4LHQT, pass=train 6N + 12LHQT (PaLM's "
            "accounting, T = spec.maxTargetLength; see flops.py).",
            [*base, "pass"],
            registry=r,
        )
        self.model_flops = Counter(
            names.MODEL_FLOPS,
            "Model FLOPs of completed steps by phase: real tokens x per-token FLOPs of the passes the "
            "phase ran (rollout, ref_inference and old_logps forward; actor_train numIterations x train).",
            [*base, "phase"],
            registry=r,
        )
        self.chips = Gauge(
            names.CHIPS, "Accelerator devices the job computes on (all hosts).", base, registry=r
        )
        self.hbm_in_use = Gauge(
            names.HBM_IN_USE,
            "Accelerator memory in use on this host's first chip at the end of the phase's last run "
            "(absent where the backend reports no memory statistics, as on CPU).",
            [*base, "phase"],
            registry=r,
        )
        self.hbm_peak = Gauge(
            names.HBM_PEAK,
            "The runtime's peak accelerator memory in use since the process started, read at the end of "
            "the phase: the first phase of a step whose value reaches the step's highest set that peak.",
            [*base, "phase"],
            registry=r,
        )
        peak = "Peak bf16 FLOP/s of one chip of spec.tpu.accelerator (Cloud TPU docs); absent off TPU."
        self.peak_flops = Gauge(names.PEAK_FLOPS, peak, base, registry=r)
        self.mfu = Gauge(
            names.MFU,
            "Model FLOPs utilization of the last step: its model FLOPs / (step seconds x chips x peak); "
            "absent off TPU.",
            base,
            registry=r,
        )
        per_chip = "Real tokens trained on per second of the last step, per chip."
        self.tokens_per_chip = Gauge(names.TOKENS_PER_SECOND_PER_CHIP, per_chip, base, registry=r)
        self.time_seconds = Counter(
            names.TIME_SECONDS,
            "Wall time of this process by kind (productive_step, compile, rollout_idle, checkpoint_save, "
            "checkpoint_restore, startup, restart; see goodput.py). Goodput = rate of productive_step.",
            [*base, "kind"],
            registry=r,
        )
        for kind in goodput.KINDS:  # from 0, so a rate over the first window sees every kind
            self.time_seconds.labels(**lb, kind=kind)
        self.compilations = Counter(
            names.COMPILATIONS,
            "XLA programs this process compiled (not loaded from the persistent compilation cache), by the "
            f"phase that compiled them ({names.COMPILE_OUTSIDE_PHASES}: outside every step phase).",
            [*base, "phase"],
            registry=r,
        )
        self.compile_seconds = Counter(
            names.COMPILE_SECONDS,
            "Seconds of XLA compilation in this process, by phase: each compile whole, so where compiles "
            "overlap in two threads their sum exceeds time_seconds_total{kind=compile} (wall seconds).",
            [*base, "phase"],
            registry=r,
        )
        self.active_phase: Callable[[], str | None] = lambda: None  # metrics_server: the recorder's
        if step_flops is not None:
            self.flops_per_token.labels(**lb, **{"pass": "forward"}).set(step_flops.forward_per_token)
            self.flops_per_token.labels(**lb, **{"pass": "train"}).set(step_flops.train_per_token)
            self.chips.labels(**lb).set(step_flops.chips)
            if step_flops.peak_per_chip is not None:
                self.peak_flops.labels(**lb).set(step_flops.peak_per_chip)

    # --- hooks -------------------------------------------------------------------------------------
    def on_compile(self, event: str, start_time: float, end_time: float, **_: Any) -> None:
        """A jax.monitoring time-span listener: counts XLA backend compiles (see ``watch_compiles``). The
        span, not only the duration, so that compiles overlapping in two threads count their wall time once
        in the goodput kinds."""
        if event == "/jax/core/compile/backend_compile_duration":
            duration_secs = end_time - start_time
            wall = self._ledger.compiled(start_time, end_time)
            self.time_seconds.labels(**self._labels, kind="compile").inc(wall)
            active = self.active_phase()  # JAX calls listeners in the compiling thread
            phase = names.PHASE_LABELS.get(active, active) if active else names.COMPILE_OUTSIDE_PHASES
            self.compilations.labels(**self._labels, phase=phase).inc()
            self.compile_seconds.labels(**self._labels, phase=phase).inc(duration_secs)

    def on_step_start(self, step: int) -> None:
        """The recorder's step-start hook: the first one ends this process's start-up (or restart)."""
        started = self._ledger.step_started(time.time())
        if started is not None:
            kind, seconds = started
            self.time_seconds.labels(**self._labels, kind=kind).inc(seconds)

    def watch_compiles(self) -> None:
        """Register ``on_compile`` with JAX, so steps that compiled are labelled ``compiled="true"``."""
        import jax.monitoring

        jax.monitoring.register_event_time_span_listener(self.on_compile)
        self._watching = True

    def unwatch_compiles(self) -> None:
        if getattr(self, "_watching", False):
            import jax.monitoring

            # AssertionError is JAX's "not registered": Tunix's MetricsLogger.close() clears them all
            with contextlib.suppress(AssertionError):
                jax.monitoring.unregister_event_time_span_listener(self.on_compile)
            self._watching = False

    def __call__(self, r: StepReport) -> None:
        """The StepCallback: record one finished global step."""
        lb = self._labels
        compiled, kinds = self._ledger.step_ended(r.seconds, r.phase_seconds)
        for kind, secs in kinds.items():
            self.time_seconds.labels(**lb, kind=kind).inc(secs)
        self._throughput(r)
        self.step_duration.labels(**lb, compiled=str(compiled).lower()).observe(r.seconds)
        for name, secs in r.phase_seconds.items():
            self.phase_duration.labels(**lb, phase=names.PHASE_LABELS.get(name, name)).observe(secs)
        for name, (in_use, peak) in r.phase_hbm.items():
            self.hbm_in_use.labels(**lb, phase=names.PHASE_LABELS.get(name, name)).set(in_use)
            self.hbm_peak.labels(**lb, phase=names.PHASE_LABELS.get(name, name)).set(peak)
        packed = str(r.packed).lower()
        self.capacity_tokens.labels(**lb, packed=packed).inc(r.slot_tokens)
        self.padding_tokens.labels(**lb, packed=packed).inc(max(0, r.padding_tokens))
        self.tokens.labels(**lb).inc(r.real_tokens)
        self.tokens_per_second.labels(**lb).set(r.real_tokens / r.seconds if r.seconds > 0 else 0.0)
        if (rollout := r.rollout_tokens_per_second) is not None:
            self.rollout_tokens.labels(**lb).set(rollout)
        for part, secs in r.sampler_seconds.items():
            self.sampler_seconds.labels(**lb, part=part).inc(secs)
        self.decode_steps.labels(**lb).inc(r.decode_steps)
        if r.rewards.size:
            self.reward_mean.labels(**lb).set(float(r.rewards.mean()))
            self.reward_min.labels(**lb).set(float(r.rewards.min()))
            self.reward_max.labels(**lb).set(float(r.rewards.max()))
        self.global_step.labels(**lb).set(r.step)
        self.last_step_duration.labels(**lb).set(r.seconds)
        if not compiled:  # the first step and compiles are covered by the first-step grace instead
            self._longest_step = max(self._longest_step, r.seconds)
        self._update_stall_threshold()
        # Last: a scrape that sees the new timestamp also sees everything else about this step.
        self.steps.labels(**lb).inc()
        self.last_step.labels(**lb).set(time.time())

    def _throughput(self, r: StepReport) -> None:
        """Model FLOPs by phase, names.MFU and tokens per second per chip of one step."""
        if self._flops is None:
            return
        lb, f = self._labels, self._flops
        by_phase = f.by_phase(r.phase_seconds, r.real_tokens)
        for name, flops in by_phase.items():
            self.model_flops.labels(**lb, phase=names.PHASE_LABELS.get(name, name)).inc(flops)
        if (per_chip := f.tokens_per_chip(r.real_tokens, r.seconds)) is not None:
            self.tokens_per_chip.labels(**lb).set(per_chip)
        if (mfu := f.mfu(sum(by_phase.values()), r.seconds)) is not None:
            self.mfu.labels(**lb).set(mfu)

    def on_checkpoint(self, step: int, seconds: float) -> None:
        """A checkpoint of ``step`` was saved in ``seconds`` (the training loop's pause)."""
        self.checkpoint_save.labels(**self._labels).observe(seconds)
        self.time_seconds.labels(**self._labels, kind="checkpoint_save").inc(seconds)
        self.checkpoint_last_step.labels(**self._labels).set(step)
        self._longest_save = max(self._longest_save, seconds)
        self._update_stall_threshold()

    def on_resume(self, step: int, seconds: float = 0.0) -> None:
        """Resumed from the checkpoint of ``step``, read in ``seconds``."""
        self._ledger.restored(seconds)
        self.time_seconds.labels(**self._labels, kind="checkpoint_restore").inc(seconds)
        self.resumed_step.labels(**self._labels).set(step)
        self.global_step.labels(**self._labels).set(step)

    def _update_stall_threshold(self) -> None:
        dynamic = 2 * self._longest_step + self._longest_save
        self.stall_threshold.labels(**self._labels).set(max(self._min_stall, math.ceil(dynamic)))

    def names(self) -> set[str]:
        """Every series name this registry exports (histograms as ``_bucket``/``_sum``/``_count``)."""
        out: set[str] = set()
        for family in self.registry.collect():
            if family.type == "histogram":
                out.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
            elif family.type == "counter":
                out.add(f"{family.name}_total")
            else:
                out.add(family.name)
        return out
