"""GRPO on packed rows == GRPO unpacked: loss, gradients, and the optimizer updates of a real step."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing.learner import PackedGRPOLearner
from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
from rljob_trainer.packing.rows import RowTooShortError
from rljob_trainer.packing.testing import (
    grpo_config,
    length_reward,
    random_train_example,
    tiny_cluster,
    tiny_model,
)
from tunix.rl.grpo.grpo_learner import GRPOLearner

ROW, MAX_P, MAX_C, BLOCK = 32, 4, 28, 8
PROMPTS = [4, 2, 3, 1, 4, 2, 1, 3]
COMPLETIONS = [28, 5, 20, 1, 9, 13, 2, 7]


@pytest.mark.parametrize(
    ("family", "attention", "overrides", "beta", "old"),
    [
        ("qwen3", "blocked", {}, True, True),
        ("qwen3", "blocked", {"loss_agg_mode": "token-mean"}, False, True),
        ("qwen3", "blocked", {"loss_agg_mode": "seq-mean-token-sum"}, True, False),
        (
            "qwen3",
            "blocked",
            {"loss_agg_mode": "sequence-mean-token-scale", "loss_algo": "gspo-token"},
            True,
            True,
        ),
        ("llama3", "blocked", {}, True, True),
        ("gemma3", "dense", {}, True, True),
    ],
)
def test_loss_and_grads_packed_equal_unpacked(grpo_case, family, attention, overrides, beta, old):
    ex = random_train_example(
        PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=2, beta=beta, old_logps=old
    )
    case = grpo_case(family, ex, row=ROW, attention_block=BLOCK, **overrides)
    case.assert_loss_and_grads_equal_unpacked(
        make_packed_grpo_loss_fn(attention=attention, block=BLOCK),
        aux=("kl", "kl_loss", "pg_loss", "entropy", "pg_clipfrac", "ppo_kl"),
    )


def run_step(learner_cls, micro_batch=1, **kwargs):
    cluster = tiny_cluster(
        "qwen3", max_prompt=8, max_completion=24, mini_batch=2, micro_batch=micro_batch, beta=0.04
    )
    cfg = grpo_config(num_iterations=2)
    cfg.num_generations = 2
    learner = learner_cls(rl_cluster=cluster, algo_config=cfg, reward_fns=[length_reward], **kwargs)
    trainer = cluster.actor_trainer
    prompts = np.array(["ab", "cde", "f", "ghij"])
    learner.train([{"prompts": prompts}])
    params = jax.tree.leaves(nnx.state(trainer.model, nnx.Param))
    return learner, trainer.train_steps, trainer.iter_steps, [np.asarray(p) for p in params]


def test_packed_step_makes_the_same_updates_as_unpacked():
    """One global step, batch 4 prompts x 2 generations, mini-batch 2, micro-batch 1, 2 GRPO iterations:
    2 mini-batches x 2 iterations = 4 optimizer updates from 8 micro-steps, packed and unpacked. The
    reference (beta > 0) and old-policy (2 iterations) log-probs are packed too."""
    _, steps_u, iters_u, params_u = run_step(GRPOLearner)
    # Rows of 64 hold both sequences of a micro-batch (prompt + completion <= 32 each): shared rows.
    learner, steps_p, iters_p, params_p = run_step(PackedGRPOLearner, row_tokens=64, attention_block=8)
    stats = learner.packing_stats
    assert stats.rows_used < stats.sequences, (stats.rows_used, stats.sequences)
    assert (steps_p, iters_p) == (steps_u, iters_u) == (4, 8)
    assert (
        learner.packing_stats.micro_batches == 4
    )  # 2 mini x 2 micro, packed once, reused per iteration  # one packed [rows, 32] batch per micro-batch
    moved = max(np.abs(p - q).max() for p, q in zip(params_u, run_initial_params(), strict=True))
    assert moved > 1e-6  # training did change the weights
    for p, q in zip(params_p, params_u, strict=True):
        assert np.abs(p - q).max() < 1e-5


def test_packed_step_on_the_token_stream_makes_the_same_updates_as_unpacked():
    """As above with micro-batches of 2 prompts x 2 generations on rows of 40 (one ~28-token sequence
    each): the per-token layers run on the token stream (fewer rows' worth than rows), the reference and
    old-policy passes too, and the optimizer updates are still the unpacked ones."""
    _, steps_u, iters_u, params_u = run_step(GRPOLearner, micro_batch=2)
    learner, steps_p, iters_p, params_p = run_step(
        PackedGRPOLearner, micro_batch=2, row_tokens=40, attention_block=8
    )
    stats = learner.packing_stats
    assert learner.stream and stats.streamed > 0, (stats.streamed, stats.micro_batches)
    assert (steps_p, iters_p) == (steps_u, iters_u)
    for p, q in zip(params_p, params_u, strict=True):
        assert np.abs(p - q).max() < 1e-5


def run_initial_params():
    return [np.asarray(p) for p in jax.tree.leaves(nnx.state(tiny_model("qwen3", seed=0), nnx.Param))]


def test_learner_refuses_a_row_shorter_than_a_sequence():
    cluster = tiny_cluster("qwen3", max_prompt=8, max_completion=24)
    with pytest.raises(RowTooShortError, match=r"spec\.packing\.maxSeqTokenPerTpu=31"):
        PackedGRPOLearner(
            rl_cluster=cluster, algo_config=grpo_config(), reward_fns=[length_reward], row_tokens=31
        )
