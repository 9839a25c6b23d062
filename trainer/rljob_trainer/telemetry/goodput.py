"""Goodput accounting: a trainer process's wall time split into kinds. Pure Python (no JAX, no Prometheus):
the arithmetic and the per-process ``Ledger``; ``metrics.py`` adds the seconds to its counters.

Goodput = productive step seconds / wall seconds. The metrics (``names.TIME_SECONDS``, a counter per
kind) make ``rate(rljob_trainer_time_seconds_total{kind="productive_step"}[w])`` the goodput over the
window ``w`` directly (seconds per second), and the other kinds the badput by cause. Time when no trainer
process runs at all (a pod being rescheduled after a preemption) adds to no counter, so it lowers the
goodput over the window without a kind of its own.

Kinds, and where each second comes from (none is counted twice):

* ``productive_step``: inside a global step, the device phases (rollout, reference and old-policy
  log-probs, actor update, weight sync) minus XLA compiles that happened during the step.
* ``compile``: wall seconds during which XLA compiled (``jax.monitoring``'s ``backend_compile_duration``
  time spans), at start-up and inside steps (a new packed-row bucket, a first call). Compiles that overlap
  (the train step compiled in one thread while the rollout's compile in another, ``packing.prewarm``)
  count their union once, so the kinds never add up to more than the wall time; the per-phase compile
  seconds (``metrics.py``) count each compile whole. A compile beside other work (the train step compiled
  while the first rollout samples) is taken out of the step's productive seconds: the first step's rollout
  shows as compile time for as long as both ran.
* ``rollout_idle``: inside a global step, the time outside every device phase: reward functions,
  advantages, batching, the next batch's data on the host. The accelerators wait for the host then. (Tunix's
  ``perf/rollout_idle_time`` is the disaggregated layout's: a separate rollout mesh waiting for the
  trainer's weight sync. rljob colocates rollout and training on one mesh, so its idle time is this.)
* ``checkpoint_save``: the training loop's pause to write a checkpoint (Orbax, blocking).
* ``checkpoint_restore``: reading the newest checkpoint back at start-up.
* ``startup``: a fresh process's start (interpreter, imports, distributed init, model build and weights)
  until its first step begins, compiles and restore excluded.
* ``restart``: the same for a process that resumed from a checkpoint, i.e. the start-up a restart costs.
  Steps redone after a restart (those after the last checkpoint) were counted productive by the process
  that did them first: the lost work shows as a lower goodput, not as a kind.
"""

from __future__ import annotations

import threading
import time

KINDS = (
    "productive_step",
    "compile",
    "rollout_idle",
    "checkpoint_save",
    "checkpoint_restore",
    "startup",
    "restart",
)


def split_step(seconds: float, phase_seconds: dict[str, float], compile_seconds: float) -> dict[str, float]:
    """One global step's wall ``seconds`` as productive and idle seconds; the rest of the step is the
    ``compile_seconds`` reported while it ran, which the compile kind already counts as they happen.

    Compiles happen inside a phase (its first call) and are taken out of the phases' time first; a compile
    longer than the phases (host-side jit) comes out of the idle time. The three add up to ``seconds``."""
    compiled = min(compile_seconds, seconds)
    in_phases = min(seconds, sum(phase_seconds.values()))
    return {
        "productive_step": max(0.0, in_phases - compiled),
        "rollout_idle": seconds - max(in_phases, compiled),
    }


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``intervals`` as sorted, disjoint intervals."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def startup_seconds(now: float, process_start: float, accounted: float) -> float:
    """Seconds from the process's start to ``now`` (its first step beginning) not already ``accounted``
    to another kind (compiles, the checkpoint restore)."""
    return max(0.0, now - process_start - accounted)


class Ledger:
    """One process's goodput bookkeeping between the metrics hooks: the wall seconds XLA compiled (JAX
    reports each compile's time span from the thread that compiled, hence the lock; overlapping spans count
    once), the checkpoint restore, and whether the first step has begun. Its methods return seconds by
    kind; the caller counts them."""

    def __init__(self, process_start: float) -> None:
        self._lock = threading.Lock()
        self._process_start = process_start
        self._compile_spans: list[tuple[float, float]] = []  # the union of the compiles so far (disjoint)
        self._compiles_in_step = 0  # since the last step ended: marks the next step compiled="true"
        self._compile_at_step_start = 0.0
        self._restore_seconds = 0.0
        self._steps_seen = 0
        self._started = False
        self._resumed = False

    def compiled(self, start: float, end: float) -> float:
        """XLA compiled from ``start`` to ``end`` (Unix seconds): the seconds of it no earlier compile
        covered, which the compile kind counts as they happen."""
        with self._lock:
            before = self._compile_wall()
            self._compile_spans = merged([*self._compile_spans, (start, end)])
            self._compiles_in_step += 1
            return self._compile_wall() - before

    def _compile_wall(self) -> float:
        """Wall seconds during which XLA compiled so far (the caller holds the lock)."""
        return sum(b - a for a, b in self._compile_spans)

    def restored(self, seconds: float) -> None:
        """The process resumed from a checkpoint read in ``seconds``: its start-up is a restart."""
        self._resumed = True
        self._restore_seconds += seconds

    def step_started(self, now: float) -> tuple[str, float] | None:
        """A step begins at ``now``. The first one ends the start-up: ("startup" or "restart", its seconds
        not already counted as compiles or restore); None for every later step."""
        with self._lock:
            self._compile_at_step_start = self._compile_wall()
            accounted = self._compile_at_step_start + self._restore_seconds
        if self._started:
            return None
        self._started = True
        kind = "restart" if self._resumed else "startup"
        return kind, startup_seconds(now, self._process_start, accounted)

    def step_ended(self, seconds: float, phase_seconds: dict[str, float]) -> tuple[bool, dict[str, float]]:
        """A step of ``seconds`` ended: (whether it compiled, its productive and idle seconds). The first
        step of a process always counts as compiled."""
        with self._lock:
            compiled = self._steps_seen == 0 or self._compiles_in_step > 0
            self._compiles_in_step = 0
            compile_in_step = self._compile_wall() - self._compile_at_step_start
            self._steps_seen += 1
        return compiled, split_step(seconds, phase_seconds, compile_in_step)


def process_start_time() -> float:
    """Unix time this process started (Linux: /proc/self/stat via prometheus-client's process collector,
    which also knows the clock tick and boot time); elsewhere, now."""
    from prometheus_client.process_collector import ProcessCollector

    for family in ProcessCollector(registry=None).collect():
        if family.name == "process_start_time_seconds" and family.samples:
            return float(family.samples[0].value)
    return time.time()
