"""The train step compiled beside the first rollout (``packing.prewarm``, issue 42): where a micro-batch's
shape is known at start (the unpacked learner's always; the packed learner's with token-budget chunks and no
block-pair lists), the first train call finds the step compiled, by a thread that ran while Tunix's rollout
thread sampled. Tested through Tunix's learner loop (rollout thread, reference and old-policy passes, two
updates), with JAX's own compile log: which thread compiled the train step, and how often. That the update
is unchanged is ``test_packing_budget.py``'s dense case (the same learner with and without a budget, 1e-5).
"""

from __future__ import annotations

import logging
import re

import jax
import numpy as np
import pytest
from rljob_trainer.packing import prewarm
from rljob_trainer.packing.learner import PackedGRPOLearner
from rljob_trainer.packing.testing import grpo_config, length_reward, tiny_cluster
from rljob_trainer.packing.unpacked import UnpackedGRPOLearner

MAX_P, MAX_C, ROW = 8, 24, 64
PROMPTS = np.array(["ab", "cde", "f", "ghij"])


@pytest.fixture
def compile_log(caplog: pytest.LogCaptureFixture):
    """JAX's "Compiling jit(name) ..." lines with the thread that compiled (every thread: a global flag)."""
    caplog.set_level(logging.WARNING)
    jax.config.update("jax_log_compiles", True)
    try:
        yield lambda name: [
            r.threadName for r in caplog.records if re.match(rf"Compiling jit\({name}\) ", r.getMessage())
        ]
    finally:
        jax.config.update("jax_log_compiles", False)


def learner(**kwargs):
    """4 prompts x 2 generations, mini-batches of 2 prompts (two updates), two GRPO iterations, beta 0.04:
    every actor-side pass of the packed learner runs."""
    cluster = tiny_cluster("qwen3", max_prompt=MAX_P, max_completion=MAX_C, mini_batch=2, beta=0.04)
    return PackedGRPOLearner(
        rl_cluster=cluster,
        algo_config=grpo_config(num_iterations=2),
        reward_fns=[length_reward],
        row_tokens=ROW,
        vocab_chunk=0,
        **kwargs,
    )


def test_the_train_step_compiles_beside_the_first_rollout(compile_log):
    run = learner(attention="dense", token_budget=ROW)  # one row a chunk: micro-batches pad to 4 chunks
    run.train([{"prompts": PROMPTS}])
    assert compile_log("_train_step") == ["rljob-prewarm"]  # once, by the thread, never by the trainer
    assert compile_log("_prefill_fn")  # the rollout compiled its own programs meanwhile
    assert run.prewarm is not None and run.prewarm.seconds is not None and run.prewarm.seconds > 0
    assert run.prewarm._thread is None  # the first train call waited for it


def test_the_unpacked_learners_step_compiles_beside_the_first_rollout(compile_log):
    """Packing off: the train step's input is Tunix's own micro-batch, one shape always (no budget)."""
    cluster = tiny_cluster("qwen3", max_prompt=MAX_P, max_completion=MAX_C, mini_batch=2, beta=0.04)
    run = UnpackedGRPOLearner(
        rl_cluster=cluster, algo_config=grpo_config(num_iterations=2), reward_fns=[length_reward]
    )
    run.train([{"prompts": PROMPTS}])
    assert compile_log("_train_step") == ["rljob-prewarm"]
    assert run.prewarm is not None and run.prewarm.seconds is not None


def test_without_it_the_trainer_compiles_the_step(compile_log, monkeypatch):
    """The same run with the switch off: the main thread compiles the step in step 1 (what the test above
    rules out)."""
    monkeypatch.setattr(prewarm, "ENABLED", False)
    learner(attention="dense", token_budget=ROW).train([{"prompts": PROMPTS}])
    assert compile_log("_train_step") == ["MainThread"]


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(attention="dense"),  # no budget: the rows are a bucket of what the micro-batch needs
        dict(attention="blocked", token_budget=ROW),  # the block-pair lists' length depends on the data
        dict(attention="dense", token_budget=4 * ROW),  # one chunk holds any micro-batch: no chunks
    ],
)
def test_nothing_is_compiled_ahead_where_the_shape_depends_on_the_data(kwargs):
    run = learner(**kwargs)
    sequences = prewarm.micro_batch_sequences(run)
    assert sequences == 4
    assert not prewarm.fixed_shape(run, sequences)
    assert prewarm.Prewarm(run, prewarm.packed_input)._thread is None


def test_the_synthetic_micro_batch_has_the_learners_fields():
    """Reference log-probs with beta > 0, old ones with two iterations: the fields the GRPO learner fills,
    so the traced step takes the same arguments as the real one."""
    run = learner(attention="dense", token_budget=ROW)
    ex = prewarm.synthetic_micro_batch(run, 4)
    assert ex.prompt_ids.shape == (4, MAX_P) and ex.completion_ids.shape == (4, MAX_C)
    assert ex.ref_per_token_logps is not None and ex.old_per_token_logps is not None
    assert bool(ex.prompt_mask.all()) and bool(ex.completion_mask.all())  # the longest sequences


def test_a_compile_that_fails_ahead_is_a_warning_and_step_1_compiles(compile_log, monkeypatch, caplog):
    """A failure the CPU cannot cause on its own (the chip's compiler refusing the program, say), made by
    a jit whose ``lower`` raises: the run trains, the trainer compiles the step as it always did."""

    class Refused:
        def lower(self, *args, **kwargs):
            raise RuntimeError("RESOURCE_EXHAUSTED: compiling the program")

    inputs = prewarm._step_and_input
    monkeypatch.setattr(prewarm, "_step_and_input", lambda *a: (Refused(), inputs(*a)[1]))
    run = learner(attention="dense", token_budget=ROW)
    run.train([{"prompts": PROMPTS}])
    assert compile_log("_train_step") == ["MainThread"]
    assert run.prewarm is not None and run.prewarm.seconds is None
    assert any("did not compile ahead (RESOURCE_EXHAUSTED" in r.getMessage() for r in caplog.records)
