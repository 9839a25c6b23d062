"""The operator's own Prometheus metrics: every name in this one module.

Own registry (not the process default), so tests can build as many as they like and the endpoint shows
only what the operator means to export. ``rljob_operator_rljobs{phase}`` and the per-RLJob series are
recomputed from the phases the operator last saw, not incremented, so they cannot drift after missed
events or restarts (the status they come from lives on the RLJob, not in the operator).

Per-RLJob series name the RLJob's namespace ``rljob_namespace``, not ``namespace``: the scrape target's
``namespace`` (the operator's) would overwrite it. The alert rules copy it into ``namespace`` with
``label_replace`` to join with the trainer's series.

Why ``rljob_operator_rljob_status_phase_timestamp_seconds`` beside the phase series: when a phase changes,
Prometheus marks the old phase's series stale, but GKE Managed Prometheus writes no staleness markers and
keeps showing it for 5 minutes. The rules therefore read an RLJob's phase as the one with the newest
timestamp (a value), never as "the series that exists", the same way they read the trainer's last-step
timestamp.
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
RLJOB_PHASE_TIMESTAMP = "rljob_operator_rljob_status_phase_timestamp_seconds"
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
        self._since: dict[tuple[str, str], float] = {}
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

    def set_phase(
        self, namespace: str, name: str, phase: str | None, restarts: int = 0, now: float | None = None
    ) -> None:
        """Record an RLJob's phase and restarts (phase None: the RLJob is gone) and recompute the gauge.

        The time the phase was first seen (``now``, default the wall clock) is kept until it changes."""
        with self._lock:
            key = (namespace, name)
            if phase is None:
                self._phases.pop(key, None)
                self._restarts.pop(key, None)
                self._since.pop(key, None)
            else:
                if self._phases.get(key) != phase:
                    self._since[key] = time.time() if now is None else now
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

    def per_rljob(self) -> list[tuple[str, str, str, int, float]]:
        """(namespace, name, phase, restarts, phase seen since) of every RLJob the operator knows, sorted."""
        with self._lock:
            return sorted(
                (ns, n, p, self._restarts.get((ns, n), 0), self._since[(ns, n)])
                for (ns, n), p in self._phases.items()
            )


class _PerRLJob:
    """Per RLJob, built at scrape time (a phase change or a deleted RLJob leaves no series behind in this
    exposition): ``rljob_operator_rljob_status_phase`` (value 1, label = current phase), the Unix time the
    operator saw it enter that phase (same labels), and its restarts."""

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
        since = GaugeMetricFamily(
            RLJOB_PHASE_TIMESTAMP,
            "Unix time this operator saw the RLJob enter its current phase (the label); the newest one per "
            "RLJob is its phase, also where a previous phase's series is still visible (GKE Managed "
            "Prometheus keeps it 5 minutes).",
            labels=[*labels, "phase"],
        )
        restarts = GaugeMetricFamily(
            RLJOB_RESTARTS,
            "The RLJob's status.restarts (JobSet restarts, disruptions included).",
            labels=labels,
        )
        for ns, name, p, n, seen in rows:
            phase.add_metric([ns, name, p], 1)
            since.add_metric([ns, name, p], seen)
            restarts.add_metric([ns, name], n)
        yield phase
        yield since
        yield restarts


def serve(metrics: OperatorMetrics, port: int, addr: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` on a background thread."""
    start_http_server(port, addr=addr, registry=metrics.registry)
