"""Checkpointer unit tests on a stand-in run (a small nnx model + optimizer, no Tunix): round trip, the
save schedule, SIGTERM, unreadable and half-written checkpoints. The end-to-end resume with the real
trainer is in test_checkpoint_resume.py.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from rljob_trainer.run import checkpoint, main
from rljob_trainer.run.checkpoint import Checkpointer
from rljob_trainer.telemetry.progress import StepRecorder


class Tiny(nnx.Module):
    def __init__(self, seed: int) -> None:
        self.lin = nnx.Linear(4, 3, rngs=nnx.Rngs(seed))


def fake_run(seed: int = 0) -> SimpleNamespace:
    model = Tiny(seed)
    opt = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
    trainer = SimpleNamespace(model=model, optimizer=opt, _train_steps=0, _iter_steps=0)
    return SimpleNamespace(
        cluster=SimpleNamespace(actor_trainer=trainer, global_steps=0), learner=SimpleNamespace(_step=0)
    )


def train_step(run: SimpleNamespace) -> None:
    """One real optimizer update, and the loop counters Tunix would advance."""
    trainer = run.cluster.actor_trainer

    def loss(m: Tiny) -> jax.Array:
        return jnp.sum(m.lin(jnp.ones((2, 4))) ** 2)

    grads = nnx.grad(loss)(trainer.model)
    trainer.optimizer.update(trainer.model, grads)
    trainer._train_steps += 1
    trainer._iter_steps += 1
    run.cluster.global_steps += 1
    run.learner._step += 1


def params(run: SimpleNamespace) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(run.cluster.actor_trainer.model))]


def opt_leaves(run: SimpleNamespace) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(run.cluster.actor_trainer.optimizer))]


def report(step: int, max_steps: int = 10) -> SimpleNamespace:
    return SimpleNamespace(step=step, max_steps=max_steps)


def make(tmp_path: Path, interval: int = 2, max_steps: int = 10, **kw) -> Checkpointer:
    kw = {"batch_size": 2, "dataset_size": 10, **kw}
    return Checkpointer(str(tmp_path / "ckpt"), interval, seed=7, max_steps=max_steps, **kw)


def test_round_trip_restores_params_optimizer_and_position(tmp_path: Path) -> None:
    run = fake_run()
    ckpt = make(tmp_path)
    for _ in range(3):
        train_step(run)
    ckpt.save(3, run)
    want_p, want_o = params(run), opt_leaves(run)

    fresh = fake_run(seed=99)  # different weights: the restore must overwrite them
    resumed: list[tuple[int, float]] = []
    restored = make(
        tmp_path, on_resumed=lambda s, secs: resumed.append((s, secs)), batch_size=4
    )  # batch changed
    step = restored.resume(fresh)
    assert step == 3 and [s for s, _ in resumed] == [3] and resumed[0][1] > 0  # restore time, goodput's
    # the recorded position (3 steps x 2), not one derived from the step; then one (new) batch a step
    assert restored.resumed_position == 6 and restored.position_at(5) == 6 + 2 * 4
    assert all(np.array_equal(a, b) for a, b in zip(params(fresh), want_p, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(opt_leaves(fresh), want_o, strict=True))
    t = fresh.cluster.actor_trainer
    assert (t._train_steps, t._iter_steps, fresh.cluster.global_steps, fresh.learner._step) == (3, 3, 3, 3)
    meta = checkpoint.read_meta(str(tmp_path / "ckpt"), 3)
    assert meta["data_position"] == {"examples": 3 * 2, "dataset_size": 10, "batch_size": 2}
    assert meta["rng"] == {**meta["rng"], "seed": 7, "next_step": 4}

    # Training on from the restored state matches training on from the original.
    train_step(run)
    train_step(fresh)
    assert all(np.array_equal(a, b) for a, b in zip(params(fresh), params(run), strict=True))


def test_schedule_every_interval_and_last_step(tmp_path: Path) -> None:
    run = fake_run()
    saved: list[int] = []
    ckpt = make(tmp_path, interval=3, max_steps=7, on_saved=lambda s, secs: saved.append(s))
    ckpt.run = run
    for step in range(1, 8):
        train_step(run)
        ckpt(report(step, 7))
    assert saved == [3, 6, 7]
    assert ckpt.steps() == [7, 6, 3]


def test_sigterm_finishes_the_step_saves_and_stops(tmp_path: Path) -> None:
    run = fake_run()
    recorder = StepRecorder(max_steps=10, packed=False)
    ckpt = make(tmp_path, interval=100)
    ckpt.run, ckpt.recorder = run, recorder
    previous = signal.getsignal(signal.SIGTERM)
    try:
        ckpt.install_sigterm_handler()
        train_step(run)
        ckpt(report(1))
        assert ckpt.steps() == [] and not recorder.stop_requested
        recorder.updating()  # step 2 already changes the actor: a SIGTERM now waits for the step's end
        os.kill(os.getpid(), signal.SIGTERM)  # handled: sets a flag only, the process lives on
        train_step(run)
        ckpt(report(2))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert ckpt.steps() == [2] and recorder.stop_requested and ckpt.stopped_by_signal
    assert checkpoint.EXIT_PREEMPTED == main.EXIT_PREEMPTED == 143


def test_sigterm_without_a_directory_still_stops(tmp_path: Path) -> None:
    recorder = StepRecorder(max_steps=10, packed=False)
    ckpt = Checkpointer(None, 5, seed=7, max_steps=10)
    ckpt.recorder, ckpt.sigterm = recorder, True
    ckpt(report(3))
    assert recorder.stop_requested and ckpt.steps() == [] and ckpt.resume(fake_run()) == 0


def _corrupt(step_dir: Path) -> None:
    """Overwrite every file of the step's params item with garbage of the same size (a bad disk, a torn
    copy): Orbax still lists the step as finalized, but it cannot be read."""
    for p in (step_dir / "params").rglob("*"):
        if p.is_file():
            p.write_bytes(b"\x00garbage" * max(1, p.stat().st_size // 8))


def test_corrupt_newest_is_skipped_and_moved_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = fake_run()
    ckpt = make(tmp_path)
    ckpt.run = run
    for step in (1, 2, 3, 4):
        train_step(run)
        if step in (2, 4):
            ckpt.save(step, run)
        if step == 2:
            at_2 = params(run)
    root = tmp_path / "ckpt"
    _corrupt(root / "4")

    fresh = fake_run(seed=5)
    with caplog.at_level(logging.WARNING, logger="rljob_trainer.run.checkpoint"):
        step = make(tmp_path).resume(fresh)
    assert step == 2
    assert all(np.array_equal(a, b) for a, b in zip(params(fresh), at_2, strict=True))
    assert "step 4" in caplog.text and "unreadable" in caplog.text
    assert not (root / "4").exists() and list(root.glob("corrupt-4-*")), "corrupt step kept for forensics"
    assert (root / "2").exists(), "the good checkpoint is untouched"

    # Training on from 2 can save step 4 again; step 2 stays as it was.
    again = make(tmp_path)
    assert again.save(4, fresh)
    assert again.steps() == [4, 2]


def test_half_written_save_is_ignored(tmp_path: Path) -> None:
    run = fake_run()
    ckpt = make(tmp_path)
    train_step(run)
    ckpt.save(1, run)
    # What a save killed mid-way leaves: Orbax's temporary directory, never renamed to "2".
    partial = tmp_path / "ckpt" / "2.orbax-checkpoint-tmp-1234567"
    (partial / "params").mkdir(parents=True)
    (partial / "params" / "half").write_bytes(b"\x01\x02")
    assert make(tmp_path).steps() == [1]
    assert make(tmp_path).resume(fake_run(seed=3)) == 1


def test_existing_step_is_never_overwritten(tmp_path: Path) -> None:
    run = fake_run()
    ckpt = make(tmp_path)
    train_step(run)
    assert ckpt.save(1, run)
    before = params(run)
    train_step(run)
    assert not ckpt.save(1, run)  # same step number: refused, the first save stays
    fresh = fake_run(seed=4)
    make(tmp_path).resume(fresh)
    assert all(np.array_equal(a, b) for a, b in zip(params(fresh), before, strict=True))
