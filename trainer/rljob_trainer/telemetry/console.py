"""What a person sees while ``rljob train`` runs: a progress bar with an ETA on a terminal, plain lines
elsewhere (pod logs), and "compiling..." whenever XLA compiles (the first step, and every new shape).

Why: the first step of a run compiles for tens of seconds on CPU and a packed run recompiles when a new
row shape appears; without a word, both look like a hang or an unexplained slow step. JAX reports the
start of every backend compile as a scalar event and its end as a duration event
(``/jax/core/compile/backend_compile_duration``); ``CompileWatch`` listens to both.

Plain bookkeeping besides those listeners: no Tunix import, JAX only when watching.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import threading
import time
from typing import TextIO

from rljob_trainer.telemetry.progress import ConsoleProgress, StepReport

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
SHOW_COMPILE_AFTER_S = 1.0
"""A compile shorter than this is not worth a word (small helper programs compile in milliseconds)."""


class CompileWatch:
    """Whether XLA is compiling right now, and how long compiles took in the current step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started: float | None = None
        self.step_seconds = 0.0
        self.on_start: list = []

    def watch(self) -> None:
        import jax.monitoring

        jax.monitoring.register_scalar_listener(self._scalar)
        jax.monitoring.register_event_duration_secs_listener(self._duration)

    def _scalar(self, event: str, value: float, **_: object) -> None:
        if event == COMPILE_EVENT:
            with self._lock:
                self.started = time.monotonic()
            for callback in self.on_start:
                callback()

    def _duration(self, event: str, seconds: float, **_: object) -> None:
        if event == COMPILE_EVENT:
            with self._lock:
                self.started = None
                self.step_seconds += seconds

    def compiling_for(self) -> float | None:
        """Seconds the running compile has taken so far (None when not compiling)."""
        with self._lock:
            return None if self.started is None else time.monotonic() - self.started

    def take_step_seconds(self) -> float:
        with self._lock:
            seconds, self.step_seconds = self.step_seconds, 0.0
        return seconds


def eta_seconds(reports: list[StepReport], compiled: list[bool]) -> float | None:
    """Remaining steps x the median of the last steps that did not compile (compiles are one-offs)."""
    if not reports:
        return None
    steady = [r.seconds for r, c in zip(reports, compiled, strict=True) if not c][-5:]
    per_step = statistics.median(steady) if steady else reports[-1].seconds
    return per_step * (reports[-1].max_steps - reports[-1].step)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"


class ProgressBar:
    """One redrawn line on a terminal: ``step 12/25 [#####.....] reward 0.31  0.21s/step  ETA 0:03``.

    A ticker thread redraws it twice a second, so a long compile shows as "compiling (XLA) 23s..." while
    it runs. Steps that compiled also leave a permanent line above the bar.
    """

    WIDTH = 24

    def __init__(self, stream: TextIO, watch: CompileWatch, max_steps: int) -> None:
        self.stream = stream
        self.watch = watch
        self.max_steps = max_steps
        self.reports: list[StepReport] = []
        self.compiled: list[bool] = []
        self.step_started = time.monotonic()
        self.current = 1
        self.began = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="rljob-progress", daemon=True)
        self._ticker.start()

    def on_step_start(self, step: int) -> None:
        self.watch.take_step_seconds()  # compiles before the step (model set-up) are not the step's
        with self._lock:
            self.current, self.step_started, self.began = step, time.monotonic(), True

    def __call__(self, r: StepReport) -> None:
        compile_s = self.watch.take_step_seconds()
        with self._lock:
            self.reports.append(r)
            self.compiled.append(compile_s > SHOW_COMPILE_AFTER_S or r.step == 1)
            if compile_s > SHOW_COMPILE_AFTER_S:
                what = "the first step" if len(self.reports) == 1 else "a new shape"
                self._write(f"step {r.step}: {r.seconds:.1f}s; XLA compiled {what} for {compile_s:.1f}s\n")
            self.current, self.step_started = r.step + 1, time.monotonic()
            if r.step >= r.max_steps:
                self._stop.set()
            self._draw()
            if r.step >= r.max_steps:
                self.stream.write("\n")
                self.stream.flush()

    def close(self) -> None:
        self._stop.set()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                self._draw()

    def _line(self) -> str:
        done = len(self.reports)
        filled = round(self.WIDTH * done / max(1, self.max_steps))
        bar = "#" * filled + "." * (self.WIDTH - filled)
        parts = [f"step {min(self.current, self.max_steps)}/{self.max_steps} [{bar}]"]
        if self.reports:
            last = self.reports[-1]
            parts += [f"reward {last.reward_mean:.3f}", f"{last.seconds:.2f}s/step"]
            parts.append(f"ETA {_clock(eta_seconds(self.reports, self.compiled))}")
        compiling = self.watch.compiling_for()
        if compiling is not None and compiling >= SHOW_COMPILE_AFTER_S:
            parts.append(f"compiling (XLA) {compiling:.0f}s...")
        elif done < self.max_steps:
            what = "step running" if self.began else "setting up (model, optimizer)"
            parts.append(f"{what} {time.monotonic() - self.step_started:.0f}s")
        return "  ".join(parts)

    def _draw(self) -> None:
        self._write(f"\r\x1b[K{self._line()}")

    def _write(self, text: str) -> None:
        if text.endswith("\n"):
            text = "\r\x1b[K" + text
        self.stream.write(text)
        self.stream.flush()


class PlainProgress(ConsoleProgress):
    """Lines for logs (no terminal): the per-step line, plus one line when a step starts compiling."""

    def __init__(self, stream: TextIO, watch: CompileWatch, every: int = 1) -> None:
        super().__init__(stream=stream, every=every)
        self.watch = watch
        self.step = 1
        self._announced = 0
        watch.on_start.append(self._compile_started)

    def on_step_start(self, step: int) -> None:
        self.step = step

    def _compile_started(self) -> None:
        if self._announced != self.step:  # one line per step, however many programs it compiles
            self._announced = self.step
            what = "the model (first step)" if self.step == 1 else "a new shape"
            print(f"step {self.step}: compiling {what} (XLA)...", file=self.stream, flush=True)

    def __call__(self, r: StepReport) -> None:
        self.watch.take_step_seconds()
        self.step = r.step + 1
        super().__call__(r)


def console(max_steps: int, every: int = 1, stream: TextIO | None = None) -> ProgressBar | PlainProgress:
    """The console callback for this output: a bar on a terminal, plain lines otherwise."""
    out = stream or sys.stdout
    watch = CompileWatch()
    with contextlib.suppress(ImportError):  # no JAX: nothing will compile either
        watch.watch()
    if out.isatty():
        return ProgressBar(out, watch, max_steps)
    return PlainProgress(out, watch, every)
