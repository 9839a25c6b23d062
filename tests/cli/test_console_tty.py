"""What ``rljob train`` shows, with real JAX: a progress bar with ETA on a terminal (a pseudo-terminal here),
plain lines through a pipe (pod logs), "compiling" when XLA compiles, and no TPU warning on a CPU run.

tests/trainer/test_console.py checks the bar and the lines with compile events fed by hand; this file
checks that JAX really sends those events and that a real run on a terminal draws the bar.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from rljob_trainer.telemetry import console

ROOT = Path(__file__).resolve().parents[2]
TRAIN = [sys.executable, "-m", "rljob_cli", "train", "-f", "examples/tiny-cpu.yaml", "--max-steps", "2"]
TPU_WARNING = "Skipping non-TPU device"


def test_jax_reports_each_compile_and_recompile_to_the_watch() -> None:
    import jax
    import jax.numpy as jnp

    three, five = jnp.ones(3), jnp.ones(5)  # made (and their small programs compiled) before watching
    watch = console.CompileWatch()
    watch.watch()
    starts: list[float | None] = []
    watch.on_start.append(lambda: starts.append(watch.compiling_for()))
    double = jax.jit(lambda x: jnp.sin(x) * 2.0 + 1.0)
    seen = []
    for x in (three, three, five):  # compiles, reuses the compiled program, compiles the new shape
        double(x).block_until_ready()
        seen.append((len(starts) > 0, watch.take_step_seconds() > 0))
        starts.clear()
    assert seen == [(True, True), (False, False), (True, True)]
    assert watch.compiling_for() is None


def _env() -> dict[str, str]:
    return {**os.environ, "JAX_PLATFORMS": "cpu", "TERM": "xterm"}


def _run_on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal; (exit code, everything it wrote)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=follower, stderr=follower, cwd=ROOT, env=_env())
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc.wait(timeout=600), b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_a_terminal_gets_a_bar_with_eta_and_a_pipe_gets_plain_lines() -> None:
    argv = [*TRAIN, "--metrics-port", "0"]
    piped = subprocess.Popen(  # both arms at once: each spends most of its time compiling
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, env=_env(), text=True
    )
    code, screen = _run_on_a_terminal(argv)
    lines, _ = piped.communicate(timeout=600)

    assert code == 0, screen
    assert "\r\x1b[K" in screen and "step 2/2 [########################]" in screen, screen
    assert "ETA 0:00" in screen and "compiling (XLA)" in screen, screen
    assert "XLA compiled the first step for" in screen, screen
    assert TPU_WARNING not in screen and "Traceback" not in screen, screen

    assert piped.returncode == 0, lines
    assert "step 1: compiling the model (first step) (XLA)...\n" in lines, lines
    assert "\nstep    1/2  reward" in lines and "\nstep    2/2  reward" in lines, lines
    assert "\x1b[" not in lines and "\r" not in lines, lines
    assert TPU_WARNING not in lines and "Traceback" not in lines, lines
