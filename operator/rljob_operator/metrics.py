"""The operator's own Prometheus metrics: every name in this one module.

Own registry (not the process default), so tests can build as many as they like and the endpoint shows
only what the operator means to export. ``rljob_operator_rljobs{phase}`` and the per-RLJob series are
recomputed from the phases the operator last saw, not incremented, so they cannot drift after missed
events or restarts (the status they come from lives on the RLJob, not in the operator).

Per-RLJob series name the RLJob's namespace ``rljob_namespace``, not ``namespace``: the scrape target's
``namespace`` (the operator's) would overwrite it. The alert rules copy it into ``namespace`` with
``label_replace`` to join with the trainer's series.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from rljob.api.spec import Phase

RECONCILE_DURATION = "rljob_operator_reconcile_duration_seconds"
RECONCILE_ERRORS = "rljob_operator_reconcile_errors_total"
RLJOBS = "rljob_operator_rljobs"
RLJOB_PHASE = "rljob_operator_rljob_status_phase"
RLJOB_RESTARTS = "rljob_operator_rljob_restarts"

PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class OperatorMetrics:
    """The operator's metrics, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.duration = Histogram(
            RECONCILE_DURATION,
            "Time spent in one reconcile (create, suspend, status sync).",
            ["handler"],
            registry=self.registry,
            buckets=BUCKETS,
        )
        self.errors = Counter(
            RECONCILE_ERRORS,
            "Reconcile errors by kind (api, conflict, invalid_spec, temporary, unexpected).",
            ["kind"],
            registry=self.registry,
        )
        self.rljobs = Gauge(
            RLJOBS, "RLJobs by phase, as last seen by this operator.", ["phase"], registry=self.registry
        )
        self._phases: dict[tuple[str, str], str] = {}
        self._restarts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        for phase in PHASES:
            self.rljobs.labels(phase=phase).set(0)
        self.registry.register(_PerRLJob(self))

    @contextmanager
    def reconcile(
        self, handler: str, classify: Callable[[BaseException], str] = lambda _: "unexpected"
    ) -> Iterator[None]:
        """Time one reconcile; an exception escaping it is counted under the kind ``classify`` gives."""
        start = time.perf_counter()
        try:
            yield
        except Exception as exc:
            self.errors.labels(kind=classify(exc)).inc()
            raise
        finally:
            self.duration.labels(handler=handler).observe(time.perf_counter() - start)

    def error(self, kind: str) -> None:
        self.errors.labels(kind=kind).inc()

    def set_phase(self, namespace: str, name: str, phase: str | None, restarts: int = 0) -> None:
        """Record an RLJob's phase and restarts (phase None: the RLJob is gone) and recompute the gauge."""
        with self._lock:
            key = (namespace, name)
            if phase is None:
                self._phases.pop(key, None)
                self._restarts.pop(key, None)
            else:
                self._phases[key] = phase
                self._restarts[key] = restarts
            counts = dict.fromkeys(PHASES, 0)
            for p in self._phases.values():
                counts[p] = counts.get(p, 0) + 1
            for p, n in counts.items():
                self.rljobs.labels(phase=p).set(n)

    def tracked(self) -> int:
        with self._lock:
            return len(self._phases)

    def per_rljob(self) -> list[tuple[str, str, str, int]]:
        """(namespace, name, phase, restarts) of every RLJob the operator knows, sorted."""
        with self._lock:
            return sorted((ns, n, p, self._restarts.get((ns, n), 0)) for (ns, n), p in self._phases.items())


class _PerRLJob:
    """One ``rljob_operator_rljob_status_phase`` series (value 1, label = current phase) and one restarts
    series per RLJob, built at scrape time, so a phase change or a deleted RLJob leaves no stale series."""

    def __init__(self, metrics: OperatorMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = self._metrics.per_rljob()
        labels = ["rljob_namespace", "rljob"]
        phase = GaugeMetricFamily(
            RLJOB_PHASE,
            "The RLJob's status.phase (value 1; like kube-state-metrics).",
            labels=[*labels, "phase"],
        )
        restarts = GaugeMetricFamily(
            RLJOB_RESTARTS,
            "The RLJob's status.restarts (JobSet restarts, disruptions included).",
            labels=labels,
        )
        for ns, name, p, n in rows:
            phase.add_metric([ns, name, p], 1)
            restarts.add_metric([ns, name], n)
        yield phase
        yield restarts


def serve(metrics: OperatorMetrics, port: int, addr: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` on a background thread."""
    start_http_server(port, addr=addr, registry=metrics.registry)
