"""Per-step reports, the callback hook that receives them, and the console progress line.

The trainer emits one ``StepReport`` per global step (after the step's weight sync, before the next
step's rollout, so the model and optimizer state are consistent at that moment). Anything that wants to
observe or act per step is a ``StepCallback``: the console printer here, and later Prometheus metrics
and Orbax checkpointing (issue 6). A callback may call ``StepRecorder.request_stop()`` (e.g. after a
SIGTERM checkpoint) to end training cleanly before the next step.

No JAX or Tunix imports: this module is plain bookkeeping.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

PHASES = ("rollout", "reference", "old_logps", "train", "weight_sync")
"""Phases timed inside a step. ``train`` is the actor update (forward, backward, optimizer)."""


@dataclass(frozen=True)
class StepReport:
    """What happened in one global step: everything a metrics exporter or a checkpointer needs."""

    step: int
    """1-based global step just completed (also the number of batches consumed: the data position)."""
    max_steps: int
    seconds: float
    """Wall time of the step, weight sync included."""
    phase_seconds: dict[str, float]
    """Seconds per phase (keys from PHASES that ran this step)."""
    rewards: np.ndarray
    """Every completion's reward this step (batch x numGenerations)."""
    real_tokens: int
    """Prompt + completion tokens of the step's batch (padding excluded). Counted once per batch: with
    numIterations > 1 the actor trains on the same rows again."""
    slot_tokens: int
    """Token slots the actor computes over for that batch: rows x row length, padded or packed (for packed
    rows including the empty rows that round a micro-batch up to a bucketed row count)."""
    used_slot_tokens: int
    """Slots of the rows holding at least one sequence (= slot_tokens when unpacked)."""
    packed: bool
    rollout_seeds: tuple[int, ...] = ()
    """Sampler seeds used this step; derived from (spec seed, step), recorded for audits of exact resume."""
    generated_tokens: int = 0
    """Completion tokens the rollout sampled this step (padding after EOS excluded)."""
    phase_hbm: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per phase: (device bytes in use at its end, the process's peak bytes in use so far), from the
    accelerator's memory statistics (``StepRecorder.memory_probe``); empty where it reports none (CPU).
    The peak is the runtime's high-water mark since start: the first phase whose value reaches a step's
    final peak is the one that set it."""

    sampler_seconds: dict[str, float] = field(default_factory=dict)
    """The JAX sampler's device time this step by part, ``prefill`` and ``decode`` (each call waited on
    until its result is ready, ``decode.install``); empty with the vLLM engine."""
    decode_steps: int = 0
    """Decode loop iterations this step, summed over sampler calls (each decodes one token for every
    sequence of the call)."""

    @property
    def decode_seconds_per_step(self) -> float | None:
        """Mean seconds of one decode iteration (None without a JAX sampler decode this step): what the
        HBM roofline of the weights and KV cache read per iteration is compared with (docs/tpu.md)."""
        secs = self.sampler_seconds.get("decode", 0.0)
        return secs / self.decode_steps if self.decode_steps else None

    @property
    def rollout_tokens_per_second(self) -> float | None:
        """Sampled completion tokens per second of the rollout phase (None if no rollout ran)."""
        secs = self.phase_seconds.get("rollout", 0.0)
        return self.generated_tokens / secs if secs > 0 else None

    @property
    def reward_mean(self) -> float:
        return float(np.mean(self.rewards)) if self.rewards.size else float("nan")

    @property
    def padding_tokens(self) -> int:
        return self.slot_tokens - self.real_tokens

    @property
    def utilization(self) -> float:
        """Fraction of computed token slots that held real tokens (what the compute sees)."""
        return self.real_tokens / self.slot_tokens if self.slot_tokens else 0.0

    @property
    def row_utilization(self) -> float:
        """Fraction of the used rows' slots that held real tokens (how well packing filled its rows)."""
        return self.real_tokens / self.used_slot_tokens if self.used_slot_tokens else 0.0


StepCallback = Callable[[StepReport], None]


@dataclass
class _Accumulator:
    """The running step's numbers, filled from the rollout thread and the training thread."""

    step: int
    started: float
    phases: dict[str, float] = field(default_factory=dict)
    rewards: list[np.ndarray] = field(default_factory=list)
    real_tokens: int = 0
    slot_tokens: int = 0
    used_slot_tokens: int = 0
    generated_tokens: int = 0
    seeds: list[int] = field(default_factory=list)
    hbm: dict[str, tuple[int, int]] = field(default_factory=dict)
    sampler: dict[str, float] = field(default_factory=dict)
    decode_steps: int = 0


class StepRecorder:
    """Collects one step's phases, rewards and token counts and hands a StepReport to every callback.

    Thread-safe: Tunix runs rollout in a worker thread and the actor update in the main thread.
    """

    def __init__(self, max_steps: int, packed: bool, callbacks: list[StepCallback] | None = None) -> None:
        self.max_steps = max_steps
        self.packed = packed
        self.callbacks: list[StepCallback] = list(callbacks or [])
        self.reports: list[StepReport] = []
        self._lock = threading.Lock()
        self._current: _Accumulator | None = None
        self._stop = False
        self._at_boundary = True
        self._active = threading.local()  # the phase each thread is in (compiles are attributed to it)
        # () -> (bytes in use, peak bytes in use) of the accelerator, or None (memory.hbm_usage); read
        # at the end of every phase. Set by the trainer, so this module needs no JAX.
        self.memory_probe: Callable[[], tuple[int, int] | None] | None = None

    def request_stop(self) -> None:
        """Ask the trainer to stop before the next step (the current one completes and is reported)."""
        self._stop = True

    @property
    def stop_requested(self) -> bool:
        return self._stop

    @property
    def at_boundary(self) -> bool:
        """Whether the actor holds exactly the last finished step's weights (or the start's) and no step
        is being reported or saved: from the end of ``begin`` (and before the first) until the step's first
        update (``updating``). A SIGTERM then need not wait for the rollout and rewards of the step under
        way (checkpoint.Checkpointer). Set and read only by the main thread, where Tunix updates the actor
        and where signal handlers run, so no lock is needed."""
        return self._at_boundary

    def updating(self) -> None:
        """The current step starts changing the actor (Tunix's ``update_actor``)."""
        self._at_boundary = False

    def begin(self, step: int) -> None:
        with self._lock:
            self._current = _Accumulator(step=step, started=time.perf_counter())
        for callback in self.callbacks:  # e.g. the console's "compiling..." needs to know the step
            start = getattr(callback, "on_step_start", None)
            if start is not None:
                start(step)
        self._at_boundary = True

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of the current step (nested calls of the same phase add up)."""
        start = time.perf_counter()
        try:
            with self.attributed(name):
                yield
        finally:
            usage = self.memory_probe() if self.memory_probe is not None else None
            with self._lock:
                if self._current is not None:
                    cur = self._current.phases
                    cur[name] = cur.get(name, 0.0) + time.perf_counter() - start
                    if usage is not None:
                        was = self._current.hbm.get(name, (0, 0))
                        self._current.hbm[name] = (max(was[0], usage[0]), max(was[1], usage[1]))

    @contextmanager
    def attributed(self, name: str) -> Iterator[None]:
        """Compiles in the calling thread count as phase ``name``'s, with no time recorded: a phase's
        program compiled ahead in another thread (``packing.prewarm``: the train step beside the rollout)."""
        outer = getattr(self._active, "phase", None)
        self._active.phase = name
        try:
            yield
        finally:
            self._active.phase = outer

    def active_phase(self) -> str | None:
        """The phase the calling thread is in (None outside every phase: start-up, between phases). Tunix
        runs rollout and the reference/old passes in a worker thread and trains in the main thread, so
        the answer is per thread."""
        return getattr(self._active, "phase", None)

    def add_rewards(self, rewards: np.ndarray) -> None:
        with self._lock:
            if self._current is not None:
                self._current.rewards.append(np.asarray(rewards, dtype=np.float64).reshape(-1))

    def add_tokens(self, real: int, slots: int, used_slots: int) -> None:
        with self._lock:
            if self._current is not None:
                self._current.real_tokens += int(real)
                self._current.slot_tokens += int(slots)
                self._current.used_slot_tokens += int(used_slots)

    def add_generated(self, tokens: int) -> None:
        with self._lock:
            if self._current is not None:
                self._current.generated_tokens += int(tokens)

    def add_sampler_call(self, part: str, seconds: float, decode_steps: int = 0) -> None:
        """One JAX sampler program ran (``part``: prefill or decode) for ``seconds`` of device time."""
        with self._lock:
            if self._current is not None:
                self._current.sampler[part] = self._current.sampler.get(part, 0.0) + seconds
                self._current.decode_steps += int(decode_steps)

    def add_seed(self, seed: int) -> None:
        with self._lock:
            if self._current is not None:
                self._current.seeds.append(int(seed))

    def finish(self) -> StepReport | None:
        """Close the running step, if any, and run every callback on its report."""
        self._at_boundary = False  # callbacks save checkpoints: not a point to leave at
        with self._lock:
            cur, self._current = self._current, None
        if cur is None:
            return None
        report = StepReport(
            step=cur.step,
            max_steps=self.max_steps,
            seconds=time.perf_counter() - cur.started,
            phase_seconds=dict(cur.phases),
            rewards=np.concatenate(cur.rewards) if cur.rewards else np.zeros(0),
            real_tokens=cur.real_tokens,
            slot_tokens=cur.slot_tokens,
            used_slot_tokens=cur.used_slot_tokens,
            packed=self.packed,
            rollout_seeds=tuple(cur.seeds),
            generated_tokens=cur.generated_tokens,
            phase_hbm=dict(cur.hbm),
            sampler_seconds=dict(cur.sampler),
            decode_steps=cur.decode_steps,
        )
        self.reports.append(report)
        for callback in self.callbacks:
            callback(report)
        return report


class ConsoleProgress:
    """One line per step for people: step, reward mean, step time, and token utilization."""

    def __init__(self, stream: TextIO | None = None, every: int = 1) -> None:
        self.stream = stream or sys.stdout
        self.every = max(1, every)

    def __call__(self, r: StepReport) -> None:
        if r.step % self.every and r.step != r.max_steps:
            return
        phases = " ".join(f"{k}={v:.2f}s" for k, v in r.phase_seconds.items())
        if r.packed:
            util = f"packing util {r.row_utilization:6.1%} (compute {r.utilization:6.1%})"
        else:
            util = f"padded util {r.utilization:6.1%}"
        print(
            f"step {r.step:>4}/{r.max_steps}  reward {r.reward_mean:.3f}  {r.seconds:6.2f}s/step  "
            f"{util}  ({phases})",
            file=self.stream,
            flush=True,
        )


def summary(reports: list[StepReport]) -> str:
    """A one-paragraph end-of-run summary (first/last rewards, mean step time)."""
    if not reports:
        return "no steps completed"
    k = max(1, min(5, len(reports) // 4))
    first = float(np.mean([r.reward_mean for r in reports[:k]]))
    last = float(np.mean([r.reward_mean for r in reports[-k:]]))
    steady = reports[1:] or reports
    secs = float(np.mean([r.seconds for r in steady]))
    return (
        f"{len(reports)} steps; reward {first:.3f} (first {k}) -> {last:.3f} (last {k}); "
        f"{secs:.2f}s/step after the first; total {sum(r.seconds for r in reports):.1f}s"
    )
