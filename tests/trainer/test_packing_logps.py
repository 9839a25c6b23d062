"""Reference and old-policy log-probs on packed rows == Tunix's unpacked ``compute_per_token_logps``;
pad tokens inside completions (vLLM) handled as unpacked."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing.example import plan_layout
from rljob_trainer.packing.learner import PackedGRPOLearner
from rljob_trainer.packing.logps import packed_completion_logps
from rljob_trainer.packing.loss import make_packed_grpo_loss_fn, packed_per_token_logps
from rljob_trainer.packing.rows import ShapeCache
from rljob_trainer.packing.testing import (
    EOS_ID,
    PAD_ID,
    grpo_config,
    length_reward,
    random_train_example,
    tiny_cluster,
    tiny_model,
)
from tunix.rl import common

ROW, MAX_P, MAX_C, BLOCK = 32, 4, 28, 8
# Two micro-batches of 4: rows shared by several sequences, one sequence filling a row exactly.
PROMPTS = [4, 2, 3, 1, 4, 2, 1, 3]
COMPLETIONS = [28, 5, 20, 1, 9, 13, 2, 7]


def unpacked(model, ex, temperature):
    graphdef, state = nnx.split(model)
    return np.asarray(
        common.compute_per_token_logps(
            graphdef, state, ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID, temperature=temperature
        )
    )


@pytest.mark.parametrize(
    ("family", "attention"),
    [("qwen3", "blocked"), ("qwen2", "blocked"), ("llama3", "blocked"), ("gemma3", "dense")],
)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_packed_completion_logps_equal_unpacked(family, attention, temperature):
    model = tiny_model(family, seed=5)
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=3)
    p, c = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
    block = BLOCK if attention == "blocked" else None
    shapes = ShapeCache(max_pairs_per_row=(ROW // BLOCK) * (ROW // BLOCK + 1) // 2)
    layouts = [
        plan_layout(
            p[s],
            p[s] != PAD_ID,
            c[s],
            c[s] != PAD_ID,
            ROW,
            pad_id=PAD_ID,
            attention_block=block,
            shapes=shapes,
        )
        for s in (slice(0, 4), slice(4, 8))
    ]
    assert all(lay.plan.rows_used < 4 for lay in layouts)  # rows hold several sequences
    got = np.asarray(
        packed_completion_logps(model, layouts, temperature=temperature, attention=attention, block=BLOCK)
    )
    want = unpacked(model, ex, temperature)
    mask = np.asarray(ex.completion_mask)
    assert got.shape == want.shape
    assert np.abs(np.where(mask, got - want, 0.0)).max() < 1e-5
    assert np.abs(want[mask]).min() > 0


def test_learner_packs_reference_and_old_passes_with_the_train_plan():
    """The cluster's reference/old calls are the packed ones, equal to Tunix's, and the train step
    reuses their plans (one plan per micro-batch)."""
    cluster = tiny_cluster("qwen3", max_prompt=8, max_completion=24, mini_batch=4, micro_batch=2, beta=0.04)
    tunix_ref, tunix_old = cluster.get_ref_per_token_logps, cluster.get_old_per_token_logps
    cfg = grpo_config(num_iterations=2)
    learner = PackedGRPOLearner(
        rl_cluster=cluster, algo_config=cfg, reward_fns=[length_reward], row_tokens=64, attention_block=8
    )
    assert cluster.get_ref_per_token_logps != tunix_ref and cluster.get_old_per_token_logps != tunix_old
    ex = random_train_example([8, 3, 5, 1], [24, 9, 2, 17], max_prompt=8, max_completion=24, seed=4)
    learner._micro_sizes = [2, 2]
    mask = np.asarray(ex.completion_mask)
    got_ref = np.asarray(cluster.get_ref_per_token_logps(ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID))
    got_old = np.asarray(cluster.get_old_per_token_logps(ex.prompt_ids, ex.completion_ids))
    assert len(learner._planned[2]) == 2  # planned once per micro-batch, shared by both passes
    want_ref = np.asarray(tunix_ref(ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID))
    want_old = np.asarray(tunix_old(ex.prompt_ids, ex.completion_ids))
    for got, want in ((got_ref, want_ref), (got_old, want_old)):
        assert np.abs(np.where(mask, got - want, 0.0)).max() < 1e-5
    assert np.abs(np.where(mask, want_ref - want_old, 0)).max() > 1e-3  # temperatures differ (0.9 vs 1.0)


def with_pads_inside(ex):
    """Put pad tokens inside completions, as Tunix's vLLM sampler (which stops only on EOS) can emit them."""
    c = np.asarray(ex.completion_ids).copy()
    c[0, [3, 4, 10]] = PAD_ID  # a run of two and a single one, in a sequence that fills its row
    c[2, 1] = PAD_ID
    c[5, 11] = PAD_ID  # right before its last real token
    return ex.replace(completion_ids=jnp.asarray(c), completion_mask=jnp.asarray(c != PAD_ID))


@pytest.mark.parametrize("attention", ["blocked", "dense"])
def test_pad_inside_a_completion_is_handled_as_unpacked(grpo_case, attention):
    """No error; log-probs, GRPO loss and gradients equal Tunix's unpacked ones (the pad is a masked key
    without a position; the token after it is predicted from the pad's column)."""
    ex = with_pads_inside(random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C))
    mask = np.asarray(ex.completion_mask)
    assert not mask[0, 3] and mask[0, 5] and not mask[5, 11] and mask[5, 12]
    case = grpo_case("qwen3", ex, row=ROW, attention_block=BLOCK, seed=2)
    got, _ = packed_per_token_logps(
        case.model, case.packed, temperature=0.9, attention=attention, block=BLOCK
    )
    want = unpacked(case.model, ex, 0.9)
    assert np.abs(np.where(mask, np.asarray(got) - want, 0.0)).max() < 1e-5
    case.assert_loss_and_grads_equal_unpacked(make_packed_grpo_loss_fn(attention=attention, block=BLOCK))
