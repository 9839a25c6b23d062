"""SIGTERM from the trainer's first line: exit at once while starting, stop after the step while training.

Why this exists: GKE sends SIGTERM on preemption, maintenance and pod deletion, then SIGKILL after the
grace period. Before training starts there is nothing to save, so the trainer must leave at once instead
of waiting out the grace period; once training runs, ``checkpoint.Checkpointer`` takes over and the
trainer finishes the step, saves it and exits 143.

Two traps make "install a handler" not enough:

* Python runs signal handlers only between bytecodes of the main thread. ``jax.distributed.initialize()``
  blocks inside C++ (waiting for the coordinator, up to its 5-minute timeout), so a handler would not run
  until it returns. ``run_interruptible`` runs such a call in a helper thread while the main thread waits
  in short, interruptible joins.
* ``jax.distributed.initialize()`` installs XLA's own SIGTERM notifier (its preemption service), which
  replaces the process's handler and only logs the signal. ``install()`` is called again right after it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

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
