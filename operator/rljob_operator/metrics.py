"""The operator's own Prometheus metrics: every name in this one module.

Own registry (not the process default), so tests can build as many as they like and the endpoint shows
only what the operator means to export. ``rljob_operator_rljobs{phase}`` is recomputed from the phases
the operator last saw, not incremented, so it cannot drift after missed events or restarts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from rljob.api.spec import Phase

RECONCILE_DURATION = "rljob_operator_reconcile_duration_seconds"
RECONCILE_ERRORS = "rljob_operator_reconcile_errors_total"
RLJOBS = "rljob_operator_rljobs"

PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class OperatorMetrics:
    """The three metrics, registered in ``registry``."""

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
        self._lock = threading.Lock()
        for phase in PHASES:
            self.rljobs.labels(phase=phase).set(0)

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

    def set_phase(self, namespace: str, name: str, phase: str | None) -> None:
        """Record an RLJob's phase (None: the RLJob is gone) and recompute the gauge."""
        with self._lock:
            key = (namespace, name)
            if phase is None:
                self._phases.pop(key, None)
            else:
                self._phases[key] = phase
            counts = dict.fromkeys(PHASES, 0)
            for p in self._phases.values():
                counts[p] = counts.get(p, 0) + 1
            for p, n in counts.items():
                self.rljobs.labels(phase=p).set(n)

    def tracked(self) -> int:
        with self._lock:
            return len(self._phases)


def serve(metrics: OperatorMetrics, port: int, addr: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` on a background thread."""
    start_http_server(port, addr=addr, registry=metrics.registry)
