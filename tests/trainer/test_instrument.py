"""The phase timer charges a pass's device work to that pass, not to the phase that next reads its result."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
from rljob_trainer import instrument
from rljob_trainer.telemetry.progress import StepRecorder


@jax.jit
def _slow(x: jax.Array) -> jax.Array:
    return jax.lax.fori_loop(0, 60, lambda i, y: jnp.tanh(y @ x), x)


def test_forward_passes_wait_for_their_device_work() -> None:
    x = jnp.ones((800, 800)) / 800
    _slow(x).block_until_ready()  # compiled
    started = time.perf_counter()
    _slow(x).block_until_ready()
    compute = time.perf_counter() - started
    started = time.perf_counter()
    pending = _slow(x)
    dispatch = time.perf_counter() - started
    pending.block_until_ready()
    assert dispatch < 0.2 * compute, "JAX dispatched synchronously here: this test would prove nothing"

    recorder = StepRecorder(max_steps=1, packed=True)
    recorder.begin(1)
    reference = instrument._timed(lambda: _slow(x), recorder, "reference")
    rollout = instrument._timed(lambda: _slow(x), recorder, "rollout")  # its results are host data already
    reference()
    out = rollout()
    out.block_until_ready()
    recorder.finish()
    phases = recorder.reports[-1].phase_seconds
    assert phases["reference"] > 0.5 * compute, (phases, compute)
    assert phases["rollout"] < 0.2 * compute, (phases, compute)
