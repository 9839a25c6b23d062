"""Exact resume with the real trainer (tiny model, CPU, subprocesses).

* SIGTERM mid-run: the trainer saves the last finished step (at once during a rollout, else after the
  step under way), exits 143; the restart resumes from exactly that step and ends with parameters IDENTICAL to an uninterrupted run with the same seed.
* SIGKILL mid-run (no chance to save): the restart resumes from the last interval checkpoint, losing
  at most ``interval`` steps, and still ends identical.

Every run here has JAX's persistent compilation cache on, as a restart on GKE has it (``compile_cache``:
on by default), in one directory of this module's: the uninterrupted run compiles, the others load its
programs, and a resume from loaded programs must end identical too. (The rest of the suite turns the
cache off, tests/conftest.py; this module's directory is its own, so no other test changes what it
sees.)
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import numpy as np
import pytest

from tests import procs
from tests.observability import runs

STEPS = 30
INTERVAL = 5
STEP_LINE = re.compile(r"^step\s+(\d+)/")


def _steps(out: str) -> list[int]:
    return [int(m.group(1)) for line in out.splitlines() if (m := STEP_LINE.match(line))]


def _assert_same_params(a: Path, b: Path, step: int) -> None:
    pa, pb = runs.load_params(a, step), runs.load_params(b, step)
    assert pa.keys() == pb.keys() and pa
    diff = [k for k in pa if not np.array_equal(pa[k], pb[k])]
    assert not diff, f"parameters differ from the uninterrupted run: {diff[:5]}"


CACHE_ON = {"JAX_ENABLE_COMPILATION_CACHE": "true"}


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("compile-cache")


def _config(tmp: Path, cache: Path) -> Path:
    """The same job in every run (seed, data, shapes), checkpointing under ``tmp``, the module's cache."""
    doc = runs.manifest("ref", STEPS, ckpt_dir=tmp / "ckpt", interval=INTERVAL, port=procs.free_port())
    doc["spec"]["compilationCache"] = {"directory": str(cache)}
    return runs.write(tmp / "rljob.yaml", doc)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, compile_cache: Path) -> Path:
    """The uninterrupted run: its final checkpoint is the expected result."""
    tmp = tmp_path_factory.mktemp("reference")
    rc, out = runs.run(_config(tmp, compile_cache), "--log-every", "1", **CACHE_ON)
    assert rc == 0, out
    assert _steps(out) == list(range(1, STEPS + 1))
    return tmp / "ckpt"


def _interrupt(tmp: Path, cache: Path, after_step: int, sig: int) -> tuple[Path, Path, int, str]:
    """Start a run, send ``sig`` once ``after_step`` is printed; returns (config, ckpt dir, rc, output)."""
    config = _config(tmp, cache)
    proc = runs.start(config, **CACHE_ON)
    lines: list[str] = []
    try:
        assert runs.wait_for_line(proc, f"step {after_step:>4}/", lines, timeout=240), "".join(lines)
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return config, tmp / "ckpt", proc.returncode, "".join(lines) + rest


@pytest.mark.slow
def test_sigterm_saves_the_step_and_resume_is_exact(
    tmp_path: Path, reference: Path, compile_cache: Path
) -> None:
    config, ckpt, rc, out = _interrupt(tmp_path, compile_cache, after_step=3, sig=signal.SIGTERM)
    assert rc == 143, out
    done = _steps(out)
    stopped = done[-1]
    assert 3 <= stopped < STEPS, out
    # after step 3's report: inside step 4's rollout (saved at once) or its update (saved after it)
    assert (
        f"SIGTERM during the rollout or rewards of step {stopped + 1}: step {stopped} is saved; exit 143"
        in out
        or f"stopped by SIGTERM after {stopped} steps" in out
    ), out
    assert (ckpt / str(stopped)).is_dir(), "the SIGTERM step itself was saved: nothing lost"

    rc, out2 = runs.run(config, **CACHE_ON)
    assert rc == 0, out2
    assert f"resumed from step {stopped}" in out2
    assert _steps(out2) == list(range(stopped + 1, STEPS + 1))
    _assert_same_params(reference, ckpt, STEPS)


@pytest.mark.slow
def test_sigkill_loses_at_most_the_interval_and_resume_is_exact(
    tmp_path: Path, reference: Path, compile_cache: Path
) -> None:
    config, ckpt, rc, out = _interrupt(
        tmp_path, compile_cache, after_step=2 * INTERVAL - 2, sig=signal.SIGKILL
    )
    assert rc == -signal.SIGKILL, out
    killed_after = _steps(out)[-1]
    assert killed_after < STEPS, out

    rc, out2 = runs.run(config, **CACHE_ON)
    assert rc == 0, out2
    resumed = int(re.search(r"resumed from step (\d+)", out2).group(1))  # type: ignore[union-attr]
    assert resumed % INTERVAL == 0 and 0 <= killed_after - resumed < INTERVAL
    assert _steps(out2) == list(range(resumed + 1, STEPS + 1))
    _assert_same_params(reference, ckpt, STEPS)
