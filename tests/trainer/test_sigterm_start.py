"""SIGTERM while the trainer starts, and the JAX process count check (both real trainer processes).

A pod is deleted or preempted while its trainer still waits in ``jax.distributed.initialize()`` for the
other hosts (a C++ call that blocks for up to 5 minutes): the trainer must leave at once with 143 and a
plain message, not wait for the grace period's SIGKILL.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from rljob_trainer.run import distributed

from tests import procs
from tests.observability import runs


def test_process_count_matches_slices_times_hosts() -> None:
    env = {"RLJOB_NUM_SLICES": "2", "RLJOB_HOSTS_PER_SLICE": "4"}
    assert distributed.process_count_errors(8, env) == []
    (error,) = distributed.process_count_errors(1, env)
    assert error.startswith("spec.tpu: JAX sees 1 process(es)") and "2 slice(s) x 4 host(s) = 8" in error
    assert distributed.process_count_errors(1, {}) == []  # not started by the operator: nothing to compare


def test_sigterm_while_waiting_for_the_other_hosts_exits_at_once(tmp_path: Path) -> None:
    config = runs.write(tmp_path / "rljob.yaml", runs.manifest("starting", 1))
    nobody = f"127.0.0.1:{procs.free_port()}"  # process 0's coordinator never comes up
    proc = runs.start(config, RLJOB_COORDINATOR=nobody, RLJOB_NUM_PROCESSES="2", RLJOB_PROCESS_ID="1")
    lines: list[str] = []
    try:
        assert runs.wait_for_line(proc, "distributed start (explicit)", lines, timeout=120), "".join(lines)
        time.sleep(1.0)  # inside jax.distributed.initialize by now
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = "".join(lines) + rest
    assert proc.returncode == 143, out
    assert waited < 5, f"took {waited:.1f}s to stop"
    assert "SIGTERM before training started" in out and "Traceback" not in out, out


def test_process_count_differing_from_the_slice_shape_exits_2(tmp_path: Path) -> None:
    config = runs.write(tmp_path / "rljob.yaml", runs.manifest("alone", 1))
    code, out = runs.run(
        config,
        RLJOB_COORDINATOR=f"127.0.0.1:{procs.free_port()}",
        RLJOB_NUM_PROCESSES="1",
        RLJOB_PROCESS_ID="0",
        RLJOB_NUM_SLICES="2",
        RLJOB_HOSTS_PER_SLICE="2",
        timeout=120,
    )
    assert code == 2, out
    assert "spec.tpu: JAX sees 1 process(es) but the slice shape needs 2 slice(s) x 2 host(s) = 4" in out
    assert "Traceback" not in out, out
