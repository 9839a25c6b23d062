"""math-verify in a worker process of its own, so the ``mathAnswer`` reward works where Tunix calls it.

Tunix computes rewards in a worker thread (``RLLearner.executor``), and math-verify's timeouts use
``signal.alarm``, which Python allows only in the main thread: called from Tunix's thread, ``parse`` and
``verify`` raise ``ValueError`` at once. Turning their timeouts off would let a pathological answer
(``9^{9^{9^9}}``, a 100000th power) hang the run. So each answer is checked in a worker process, in that
process's main thread, with math-verify's own
timeouts; the trainer waits for each reply at most ``hard_limit_s`` and replaces a worker that does not
answer (a computation that signals cannot interrupt). A timed-out answer scores 0 with a warning; any other
failure of the worker raises, so an environment problem never reads as a run of wrong answers.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

STARTUP_LIMIT_S = 120.0
"""How long a new worker may take to import math-verify and sympy (seconds on a busy host)."""


class MathVerifyError(RuntimeError):
    """The worker failed for a reason other than a slow answer (math-verify missing, the worker killed)."""


def check_answer(guess: str, gold: str, timeout_s: int) -> tuple[float, bool]:
    """(1.0 if ``guess`` is equivalent to ``gold`` else 0.0, whether a math-verify timeout fired).

    Runs in the worker's main thread, where math-verify's ``signal.alarm`` timeouts work. Parse and
    comparison failures are math-verify's own "no match" (its ``raise_on_error=False``); a timeout is told
    apart from them by the warning math-verify logs for it.
    """
    from math_verify import parse, verify

    with _TimeoutCounter() as timeouts:
        gold_parsed = parse(gold, parsing_timeout=timeout_s)
        guess_parsed = parse(guess, parsing_timeout=timeout_s)
        equal = bool(
            gold_parsed and guess_parsed and verify(gold_parsed, guess_parsed, timeout_seconds=timeout_s)
        )
    return (1.0 if equal else 0.0), timeouts.count > 0


class _TimeoutCounter(logging.Handler):
    """Counts math-verify's "Timeout during parsing/comparison" warnings while installed."""

    LOGGERS = ("math_verify.parser", "math_verify.grader")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Timeout during"):
            self.count += 1

    def __enter__(self) -> _TimeoutCounter:
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)


def _serve() -> None:
    """The worker (``python math_worker.py``): answers JSON lines ``[guess, gold, timeout_s]`` on stdin
    with ``["ok", score, timed_out]`` or ``["error", text]`` on its own copy of stdout, until stdin ends.
    Anything else written to stdout goes to stderr, so no stray print breaks the protocol."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle; it closes stdin
    logging.getLogger("math_verify").setLevel(logging.WARNING)

    def send(*reply: object) -> None:
        out.write(json.dumps(reply) + "\n")
        out.flush()

    try:
        import math_verify  # noqa: F401  (imported once, before "ready")
    except Exception as exc:  # reported to the trainer, which raises it
        send("error", f"cannot import math_verify: {type(exc).__name__}: {exc}")
        return
    send("ready")
    for line in sys.stdin:
        guess, gold, timeout_s = json.loads(line)
        try:
            score, timed_out = check_answer(guess, gold, timeout_s)
        except Exception as exc:  # reported to the trainer, which raises it
            send("error", f"{type(exc).__name__}: {exc}")
        else:
            send("ok", score, timed_out)


class MathVerifier:
    """A math-verify worker process, started on first use and replaced when it stops answering.

    A plain ``python math_worker.py`` child, not ``multiprocessing``: a spawned interpreter re-imports the
    parent's main module, which fails for scripts without a ``__main__`` guard, and forking a process
    that runs JAX's threads is unsafe. Thread-safe (one request at a time). ``timeout_s`` is math-verify's
    per-parse and per-comparison limit (its default, 5 s); ``hard_limit_s`` bounds the wait for one answer
    (default: two parses and four comparisons timing out, plus a margin).
    """

    def __init__(self, timeout_s: int = 5, hard_limit_s: float | None = None) -> None:
        self.timeout_s = timeout_s
        self.hard_limit_s = hard_limit_s if hard_limit_s is not None else 6 * timeout_s + 10
        self.timeouts = 0  # answers scored 0 because they timed out, since this verifier was made
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """1.0 or 0.0 for each ``(guess, gold)``; math-verify syntax (``$...$`` for LaTeX)."""
        with self._lock:
            return [self._one(guess, gold) for guess, gold in pairs]

    def _one(self, guess: str, gold: str) -> float:
        proc = self._started()
        self._send(proc, [guess, gold, self.timeout_s])
        reply = self._reply(proc, self.hard_limit_s)
        if reply is None:
            self._stop()
            self.timeouts += 1
            log.warning("mathAnswer: no verdict within %.0f s, scored 0: %.200r", self.hard_limit_s, guess)
            return 0.0
        if reply[0] != "ok":
            raise MathVerifyError(f"math-verify failed: {reply[1]}")
        _, score, timed_out = reply
        if timed_out:
            self.timeouts += 1
            log.warning("mathAnswer: math-verify timed out (%d s), scored 0: %.200r", self.timeout_s, guess)
        return float(score)

    def _send(self, proc: subprocess.Popen[bytes], request: list[Any]) -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except OSError as exc:
            self._stop()
            raise MathVerifyError(f"the math-verify worker ended: {exc}") from None

    def _reply(self, proc: subprocess.Popen[bytes], limit_s: float) -> list[Any] | None:
        """The worker's next reply; None if it gave none within ``limit_s``; raises if it ended."""
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], limit_s)
        if not ready:
            return None
        line = proc.stdout.readline()
        if not line:
            code = proc.wait()
            self._stop()
            raise MathVerifyError(f"the math-verify worker ended (exit code {code})")
        return json.loads(line)

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        self._proc = subprocess.Popen(
            [sys.executable, "-P", __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        reply = self._reply(self._proc, STARTUP_LIMIT_S)
        if reply is None or reply[0] != "ready":
            self._stop()
            why = reply[1] if reply else f"no answer within {STARTUP_LIMIT_S:.0f} s"
            raise MathVerifyError(f"the math-verify worker cannot start: {why}")
        return self._proc

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()
        self._proc = None

    def close(self) -> None:
        """Stop the worker (the next ``score`` starts another)."""
        with self._lock:
            self._stop()


if __name__ == "__main__":
    _serve()
