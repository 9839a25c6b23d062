"""Serving the trainer's metrics: ``/metrics`` over HTTP on every host, fed by the step recorder.

The series themselves (names, meaning) are ``metrics.py``'s; this module wires them to a running trainer:
the HTTP server, JAX's compile events, the model FLOPs of the job's model and the chip's peak.
"""

from __future__ import annotations

import atexit
import os
import time
from typing import Any

from prometheus_client import start_http_server

from rljob_trainer.telemetry import flops, goodput
from rljob_trainer.telemetry.metrics import TrainerMetrics

LINGER_ENV = "RLJOB_METRICS_LINGER_SECONDS"
"""Seconds to keep serving /metrics after training ends (default 0), so the last scrape sees the end."""
ADDR_ENV = "RLJOB_METRICS_ADDR"
"""Address /metrics binds to (default 0.0.0.0: every interface, as a pod's scrape needs; tests use
127.0.0.1)."""


def step_flops(job: Any) -> flops.StepFlops:
    """FLOPs per token of the job's model (Tunix's config for spec.model) at spec.maxTargetLength, the
    devices JAX sees, and the peak of spec.tpu.accelerator when the backend is a TPU (None elsewhere)."""
    import jax

    from rljob_trainer.models import families as models

    spec = job.spec
    if spec.model.backend == "maxtext":  # MaxText's own config (imports MaxText: this backend only)
        from rljob_trainer.models.maxtext import decoders as maxtext_models

        mx = maxtext_models.maxtext_config(spec.model, max_target_length=spec.maxTargetLength, seed=0)
        config = maxtext_models.flops_config(mx)
    else:
        config = models.model_config(spec.model)
    return flops.step_flops(
        config,
        seq_len=spec.maxTargetLength,
        iterations=spec.grpo.numIterations,
        chips=jax.device_count(),
        peak=flops.peak_flops(spec.tpu.accelerator, jax.default_backend()),
    )


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
        step_flops=step_flops(job),
        process_start=goodput.process_start_time(),
    )
    metrics.active_phase = recorder.active_phase  # compiles by phase
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
