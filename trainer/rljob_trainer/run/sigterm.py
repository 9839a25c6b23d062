"""SIGTERM from the trainer's first line: exit at once while starting, stop after the step while training.

Why this exists: GKE sends SIGTERM on preemption, maintenance and pod deletion, then SIGKILL after the
grace period. Before training starts there is nothing to save, so the trainer must leave at once instead
of waiting out the grace period; once training runs, ``checkpoint.Checkpointer`` takes over (its SIGTERM
half, ``StopOnSigterm``, is here) and the trainer saves the last finished step and exits 143.

Two traps make "install a handler" not enough:

* Python runs signal handlers only between bytecodes of the main thread. ``jax.distributed.initialize()``
  blocks inside C++ (waiting for the coordinator, up to its 5-minute timeout), so a handler would not run
  until it returns. ``run_interruptible`` runs such a call in a helper thread while the main thread waits
  in short, interruptible joins.
* ``jax.distributed.initialize()`` installs XLA's own SIGTERM notifier (its preemption service), which
  replaces the process's handler and only logs the signal. ``install()`` is called again right after it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

log = logging.getLogger("rljob_trainer.run.checkpoint")  # the checkpointer's messages, one logger

EXIT_SIGTERM = 143
"""128 + SIGTERM: what a process killed by SIGTERM reports; retryable for the JobSet."""

T = TypeVar("T")


class StopNow(BaseException):
    """Raised by the training SIGTERM handler in the main thread while it only waits for the rollout and
    rewards of a step (the actor still holds the last finished step): leaves Tunix's loop at once instead
    of waiting for a rollout or reward that may outlast the grace period. A BaseException, so no
    ``except Exception`` on the way (Tunix's, JAX's) swallows it."""


_on_sigterm: Callable[[], None] | None = None


def _handle(signum: int, frame: FrameType | None) -> None:
    if _on_sigterm is not None:
        _on_sigterm()
        return
    print(f"SIGTERM before training started: nothing to save, exiting {EXIT_SIGTERM}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_SIGTERM)  # no interpreter shutdown: a helper thread may be blocked in C++ (see above)


def install() -> None:
    """(Re)install the handler; a no-op outside the main thread (only it may set handlers: tests)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _handle)


def while_training(callback: Callable[[], None] | None) -> None:
    """From now on SIGTERM calls ``callback`` (it sets a flag) instead of exiting; None restores the exit."""
    global _on_sigterm
    _on_sigterm = callback
    install()


def run_interruptible(fn: Callable[[], T], poll_seconds: float = 0.2) -> T:
    """``fn()`` in a daemon thread, the main thread staying responsive to SIGTERM; re-raises its error."""
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the caller below, whatever it is
            error.append(exc)

    thread = threading.Thread(target=target, name="rljob-blocking-start", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(poll_seconds)
    if error:
        raise error[0]
    return result[0]


def leave_by(seconds: float, still_waiting: Callable[[], str | None]) -> threading.Timer:
    """After ``seconds``, unless ``still_waiting()`` returns None, print its message and exit 143 at once.

    Why: a SIGTERM in the middle of a step (after its first update) waits for the step to end so that it
    can be saved, and a step may outlast the grace period (a slow reward, a long rollout); the kubelet's
    SIGKILL would then end the pod with 137 and nothing said. Leaving a little before it, with the reason,
    is the same loss (the unfinished step) told plainly."""

    def fire() -> None:
        message = still_waiting()
        if message is None:
            return
        print(message, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_SIGTERM)  # the main thread may be blocked in a collective or a reward (see above)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def _info(msg: str, *args: Any) -> None:
    import jax

    if jax.process_index() == 0:
        log.warning(msg, *args)  # WARNING: the trainer's logging level hides INFO (Tunix is chatty)


class StopOnSigterm:
    """The SIGTERM half of ``checkpoint.Checkpointer`` (its module docstring says what happens when):
    leave at once while a step only waits for its rollout and rewards, else finish the step and save it,
    and give the step up rather than outlast the grace period. Reads the checkpointer's state
    (``recorder``, ``_manager``, ``last_saved``, ``resumed_step``, ``grace_seconds``, ``_longest_save``,
    ``_saving``, ``stopped_by_signal``) and calls its ``save``."""

    sigterm: bool
    recorder: Any
    _manager: Any
    last_saved: int | None
    resumed_step: int
    grace_seconds: float
    _longest_save: float
    _saving: bool
    stopped_by_signal: bool
    save: Callable[..., bool]

    def install_sigterm_handler(self) -> None:
        """On SIGTERM, finish the current step, save it and stop (``checkpoint``'s module docstring)."""

        def handler(signum: int, frame: FrameType | None) -> None:
            first, self.sigterm = not self.sigterm, True
            if first and self._can_stop_now():
                raise StopNow()  # out of Tunix's wait for the data thread (checkpoint's docstring)
            if first:
                leave_by(self.step_deadline(), self._unfinished)
            _info(
                "SIGTERM received: finishing the current step, then checkpointing and exiting %d",
                EXIT_SIGTERM,
            )

        if threading.current_thread() is not threading.main_thread():  # only the main thread may (tests)
            log.warning("not in the main thread: no SIGTERM handler installed")
            return
        while_training(lambda: handler(signal.SIGTERM, None))  # until now SIGTERM exited at once

    def step_deadline(self) -> float:
        """Seconds after a mid-step SIGTERM to wait for the step: the grace period less room for its save
        (twice the longest save of this process, at least 10 s; half the grace period before any save)."""
        reserve = max(10.0, 2 * self._longest_save) if self._longest_save else self.grace_seconds / 2
        return max(1.0, self.grace_seconds - min(reserve, self.grace_seconds / 2))

    def _unfinished(self) -> str | None:
        """At the deadline: None while the step's save runs or after it; else why the trainer leaves."""
        if self._saving or self.stopped_by_signal:
            return None
        last = self._last_finished()
        saved = self.last_saved if self.last_saved is not None else self.resumed_step
        if self._manager is None:
            resumes = "nothing is saved (no spec.checkpoint.directory)"
        else:
            resumes = f"the run resumes from step {saved}" if saved else "the run restarts from the start"
        return (
            f"SIGTERM during step {1 if last is None else last + 1}: it did not finish within "
            f"{self.step_deadline():.0f} s of the {self.grace_seconds:.0f} s grace period "
            f"(spec.terminationGracePeriodSeconds) and is not saved; exit {EXIT_SIGTERM}: {resumes}"
        )

    def _last_finished(self) -> int | None:
        """The last step finished in this process (None: none yet; a resumed step is already saved)."""
        reports = self.recorder.reports if self.recorder is not None else []
        return reports[-1].step if reports else None

    def _can_stop_now(self) -> bool:
        """Whether a SIGTERM may leave now (the main thread is in the signal handler): the actor holds the
        last finished step, and saving it needs no other host."""
        if self.recorder is None or not self.recorder.at_boundary:
            return False
        unsaved = self._manager is not None and self._last_finished() not in (None, self.last_saved)
        import jax

        return not unsaved or jax.process_count() == 1

    def stop_now(self) -> str:
        """After ``sigterm.StopNow``: save the last finished step (when not yet saved); what happened, for
        the console."""
        step = self._last_finished()
        if step is None:
            return "SIGTERM before a step finished in this process: nothing to save"
        if self._manager is None:
            return f"SIGTERM after step {step}: no spec.checkpoint.directory, nothing saved"
        self.save(step)
        return f"SIGTERM during the rollout or rewards of step {step + 1}: step {step} is saved"
