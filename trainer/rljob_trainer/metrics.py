"""The trainer's Prometheus metrics: every metric name the trainer exports is defined in this one module.

Why one module: the alert rules (``charts/rljob/files/rljob-alerts.rules.yaml``) and the dashboard
(``dashboard.py``) name these series, and a test reads the names from ``TrainerMetrics().registry`` so
the three cannot drift apart.

Conventions (see docs/observability.md): prefix ``rljob_trainer_``, base units (seconds, tokens),
counters end in ``_total``, metadata in ``rljob_trainer_build_info``. Every series carries
``rljob`` (the RLJob's name) and ``process`` (the JAX process index): every host serves its own
``/metrics``, so a single stuck host shows up as one stale ``last_step_timestamp``.

Steps that compiled (the first step of a process, and any step during which XLA compiled something,
e.g. a new packed-row bucket) are labelled ``compiled="true"`` in the step histogram, so the mean that
the regression alert compares with the baseline uses ``compiled="false"`` steps only.

No JAX import at module level: building the registry is cheap and works in tests without JAX.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import math
import os
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from rljob_trainer.progress import StepReport

PREFIX = "rljob_trainer_"
STEP_DURATION = "rljob_trainer_step_duration_seconds"
PHASE_DURATION = "rljob_trainer_phase_duration_seconds"
STEPS = "rljob_trainer_steps_total"
GLOBAL_STEP = "rljob_trainer_global_step"
MAX_STEPS = "rljob_trainer_max_steps"
LAST_STEP_TIMESTAMP = "rljob_trainer_last_step_timestamp_seconds"
STEP_TIME_BASELINE = "rljob_trainer_step_time_baseline_seconds"
STALL_THRESHOLD = "rljob_trainer_stall_threshold_seconds"
FIRST_STEP_GRACE = "rljob_trainer_first_step_grace_seconds"
LAST_STEP_DURATION = "rljob_trainer_last_step_duration_seconds"
CAPACITY_TOKENS = "rljob_trainer_packing_capacity_tokens_total"
PADDING_TOKENS = "rljob_trainer_packing_padding_tokens_total"
TOKENS = "rljob_trainer_tokens_total"
TOKENS_PER_SECOND = "rljob_trainer_tokens_per_second"
REWARD_MEAN = "rljob_trainer_reward_mean"
REWARD_MIN = "rljob_trainer_reward_min"
REWARD_MAX = "rljob_trainer_reward_max"
COMPILE_SECONDS = "rljob_trainer_compile_seconds_total"
CHECKPOINT_SAVE_DURATION = "rljob_trainer_checkpoint_save_duration_seconds"
CHECKPOINT_LAST_STEP = "rljob_trainer_checkpoint_last_step"
RESUMED_STEP = "rljob_trainer_resumed_step"
BUILD_INFO = "rljob_trainer_build_info"

STEP_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600)
"""0.1 s to 10 min: prometheus-client's default buckets stop at 10 s, far too short for RL steps."""

PHASE_LABELS = {
    "rollout": "rollout",
    "reference": "ref_inference",
    "old_logps": "old_logps",
    "train": "actor_train",
    "weight_sync": "weight_sync",
}
"""progress.PHASES -> the ``phase`` label (Tunix's perf names: rollout, ref_inference, actor_train, ...)."""

DEFAULT_STALL_THRESHOLD_SECONDS = 1800.0
"""spec.metrics.stallThresholdSeconds's default: the minimum; the exported threshold grows to cover the
longest steady step twice plus the longest checkpoint save."""
DEFAULT_FIRST_STEP_GRACE_SECONDS = 3600.0
"""spec.metrics.firstStepGraceSeconds's default."""
LINGER_ENV = "RLJOB_METRICS_LINGER_SECONDS"
"""Seconds to keep serving /metrics after training ends (default 0), so the last scrape sees the end."""
ADDR_ENV = "RLJOB_METRICS_ADDR"
"""Address /metrics binds to (default 0.0.0.0: every interface, as a pod's scrape needs; tests use
127.0.0.1)."""


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
        stall_threshold_seconds: float = DEFAULT_STALL_THRESHOLD_SECONDS,
        first_step_grace_seconds: float = DEFAULT_FIRST_STEP_GRACE_SECONDS,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        base = ["rljob", "process"]
        self._labels = {"rljob": rljob, "process": str(process)}
        self.step_duration = Histogram(
            STEP_DURATION,
            "Wall time of one global step (rollout to weight sync); compiled=true when XLA "
            "compiled during the step.",
            [*base, "compiled"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.phase_duration = Histogram(
            PHASE_DURATION,
            "Wall time of one phase of a global step.",
            [*base, "phase"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.steps = Counter(
            STEPS, "Global steps completed by this process since it started.", base, registry=r
        )
        self.global_step = Gauge(
            GLOBAL_STEP, "Last completed global step (continues across resumes).", base, registry=r
        )
        self.max_steps = Gauge(MAX_STEPS, "spec.grpo.maxSteps.", base, registry=r)
        self.last_step = Gauge(
            LAST_STEP_TIMESTAMP,
            "Unix time the last global step completed (the "
            "process start time until the first step completes).",
            base,
            registry=r,
        )
        self.baseline = Gauge(
            STEP_TIME_BASELINE,
            "spec.metrics.stepTimeBaselineSeconds (expected seconds per global step); absent when unset.",
            base,
            registry=r,
        )
        self.stall_threshold = Gauge(
            STALL_THRESHOLD,
            "Seconds without a step after which training counts as stalled: "
            "spec.metrics.stallThresholdSeconds or twice the longest steady step plus the longest "
            "checkpoint save seen, whichever is larger.",
            base,
            registry=r,
        )
        self.first_step_grace = Gauge(
            FIRST_STEP_GRACE,
            "spec.metrics.firstStepGraceSeconds: how long this process may take for its first step "
            "(compiles) before it counts as stalled.",
            base,
            registry=r,
        )
        self.last_step_duration = Gauge(
            LAST_STEP_DURATION,
            "Wall time of the last global step (shown where a rate window holds no step).",
            base,
            registry=r,
        )
        self.capacity_tokens = Counter(
            CAPACITY_TOKENS,
            "Token slots the actor computed over (rows x row length).",
            [*base, "packed"],
            registry=r,
        )
        self.padding_tokens = Counter(
            PADDING_TOKENS, "Token slots that held padding, not real tokens.", [*base, "packed"], registry=r
        )
        self.tokens = Counter(
            TOKENS, "Real (prompt + completion) tokens the actor trained on.", base, registry=r
        )
        self.tokens_per_second = Gauge(
            TOKENS_PER_SECOND, "Real tokens trained on per second of the last step.", base, registry=r
        )
        self.reward_mean = Gauge(REWARD_MEAN, "Mean reward of the last step's completions.", base, registry=r)
        self.reward_min = Gauge(
            REWARD_MIN, "Minimum reward of the last step's completions.", base, registry=r
        )
        self.reward_max = Gauge(
            REWARD_MAX, "Maximum reward of the last step's completions.", base, registry=r
        )
        self.compile_seconds = Counter(COMPILE_SECONDS, "XLA backend compile time.", base, registry=r)
        self.checkpoint_save = Histogram(
            CHECKPOINT_SAVE_DURATION,
            "Wall time the training loop paused to save a checkpoint.",
            base,
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.checkpoint_last_step = Gauge(
            CHECKPOINT_LAST_STEP, "Global step of the last saved checkpoint.", base, registry=r
        )
        self.resumed_step = Gauge(
            RESUMED_STEP, "Global step this process resumed from (0: fresh start).", base, registry=r
        )
        self.build_info = Gauge(
            BUILD_INFO, "Versions of the trainer's stack (value 1).", [*base, *versions()], registry=r
        )

        lb = self._labels
        self.build_info.labels(**lb, **versions()).set(1)
        self.steps.labels(**lb)
        for compiled in ("true", "false"):  # from 0, so a rate sees steps that land between two scrapes
            self.step_duration.labels(**lb, compiled=compiled)
        self.global_step.labels(**lb).set(0)
        self.max_steps.labels(**lb).set(max_steps)
        self.last_step.labels(**lb).set(time.time())
        self.compile_seconds.labels(**lb)
        self.resumed_step.labels(**lb).set(0)
        if baseline_seconds is not None:
            self.baseline.labels(**lb).set(baseline_seconds)
        self.first_step_grace.labels(**lb).set(first_step_grace_seconds)
        self._min_stall = stall_threshold_seconds
        self._longest_step = 0.0
        self._longest_save = 0.0
        self.stall_threshold.labels(**lb).set(stall_threshold_seconds)
        self._lock = threading.Lock()
        self._compile_in_step = 0.0
        self._steps_seen = 0

    # --- hooks -------------------------------------------------------------------------------------
    def on_compile(self, event: str, duration_secs: float, **_: Any) -> None:
        """A jax.monitoring duration listener: counts XLA backend compiles (see ``watch_compiles``)."""
        if event == "/jax/core/compile/backend_compile_duration":
            self.compile_seconds.labels(**self._labels).inc(duration_secs)
            with self._lock:
                self._compile_in_step += duration_secs

    def watch_compiles(self) -> None:
        """Register ``on_compile`` with JAX, so steps that compiled are labelled ``compiled="true"``."""
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(self.on_compile)
        self._watching = True

    def unwatch_compiles(self) -> None:
        if getattr(self, "_watching", False):
            import jax.monitoring

            jax.monitoring.unregister_event_duration_listener(self.on_compile)
            self._watching = False

    def __call__(self, r: StepReport) -> None:
        """The StepCallback: record one finished global step."""
        lb = self._labels
        with self._lock:
            compiled = self._steps_seen == 0 or self._compile_in_step > 0
            self._compile_in_step = 0.0
            self._steps_seen += 1
        self.step_duration.labels(**lb, compiled=str(compiled).lower()).observe(r.seconds)
        for name, secs in r.phase_seconds.items():
            self.phase_duration.labels(**lb, phase=PHASE_LABELS.get(name, name)).observe(secs)
        packed = str(r.packed).lower()
        self.capacity_tokens.labels(**lb, packed=packed).inc(r.slot_tokens)
        self.padding_tokens.labels(**lb, packed=packed).inc(max(0, r.padding_tokens))
        self.tokens.labels(**lb).inc(r.real_tokens)
        self.tokens_per_second.labels(**lb).set(r.real_tokens / r.seconds if r.seconds > 0 else 0.0)
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

    def on_checkpoint(self, step: int, seconds: float) -> None:
        """A checkpoint of ``step`` was saved in ``seconds`` (the training loop's pause)."""
        self.checkpoint_save.labels(**self._labels).observe(seconds)
        self.checkpoint_last_step.labels(**self._labels).set(step)
        self._longest_save = max(self._longest_save, seconds)
        self._update_stall_threshold()

    def on_resume(self, step: int) -> None:
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


class MetricsServer:
    """``/metrics`` on ``port`` for one registry, on a daemon thread; ``close()`` stops it."""

    def __init__(self, metrics: TrainerMetrics, port: int, addr: str = "0.0.0.0") -> None:
        self.port = port
        self._server, self._thread = start_http_server(port, addr=addr, registry=metrics.registry)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


_servers: list[tuple[MetricsServer, TrainerMetrics]] = []


def start(job: Any, process_index: int, recorder: Any, addr: str | None = None) -> TrainerMetrics:
    """Metrics for ``job`` (an RLJob) on this process: served on ``spec.metrics.port`` right away (so a
    long first compile is already visible), fed by ``recorder``'s step reports and by JAX's compile events.
    """
    spec = job.spec
    addr = addr or os.environ.get(ADDR_ENV) or "0.0.0.0"
    metrics = TrainerMetrics(
        rljob=job.metadata.name,
        process=process_index,
        baseline_seconds=spec.metrics.stepTimeBaselineSeconds,
        max_steps=spec.grpo.maxSteps,
        stall_threshold_seconds=spec.metrics.stallThresholdSeconds,
        first_step_grace_seconds=spec.metrics.firstStepGraceSeconds,
    )
    metrics.watch_compiles()
    _servers.append((MetricsServer(metrics, spec.metrics.port, addr=addr), metrics))
    shown = "localhost" if addr in ("0.0.0.0", "") else addr
    print(f"metrics: http://{shown}:{spec.metrics.port}/metrics (process {process_index})", flush=True)
    recorder.callbacks.append(metrics)
    linger = float(os.environ.get(LINGER_ENV, "0") or 0)
    if linger > 0:  # keep serving the final values for one more scrape before the process exits
        atexit.register(time.sleep, linger)
    return metrics


def close_servers() -> None:
    """Stop every server ``start`` opened and its compile listener (for in-process runs, e.g. tests that
    call ``main.train`` several times; a trainer process just exits)."""
    while _servers:
        server, metrics = _servers.pop()
        server.close()
        metrics.unwatch_compiles()
