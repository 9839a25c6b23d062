"""Through MaxText's Tunix adapter: packed per-token log-probs, GRPO loss and gradients == unpacked.

Unpacked is Tunix's own path (``common.compute_per_token_logps`` / ``grpo_loss_fn``: padded rows, the
adapter turns Tunix's attention mask into segment ids). Packed is the packing package with attention
``segments``: several sequences in one row, ``segment_ids`` and per-sequence positions handed straight to
MaxText, whose own attention masks by segment and causality.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing.adapter import resolve_attention
from rljob_trainer.packing.example import pack_train_example
from rljob_trainer.packing.loss import make_packed_grpo_loss_fn, packed_per_token_logps
from rljob_trainer.packing.testing import EOS_ID, PAD_ID, grpo_config, random_train_example
from tunix.rl import common
from tunix.rl.algo_core import grpo_loss_fn

ROW, MAX_P, MAX_C, TEMP = 32, 4, 28, 0.9
PROMPTS = [4, 2, 3, 1, 4, 2, 1, 3]
COMPLETIONS = [28, 5, 20, 1, 9, 13, 2, 7]


def test_auto_attention_is_maxtexts_own(tiny):
    model, _ = tiny
    assert resolve_attention(model) == "segments"
    with pytest.raises(ValueError, match="does not support model family 'maxtext'"):
        resolve_attention(model, "blocked")


@pytest.mark.parametrize(
    ("prompts", "completions"),
    [(PROMPTS, COMPLETIONS), ([1] * 12, [1, 2, 1, 3, 1, 1, 2, 1, 1, 1, 2, 1]), ([3, 2], [4, 6])],
)
def test_packed_logps_equal_unpacked(tiny, prompts, completions):
    model, mesh = tiny
    ex = random_train_example(prompts, completions, max_prompt=MAX_P, max_completion=MAX_C, seed=1)
    packed, plan = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=None)
    assert plan.rows_used < len(prompts)  # sequences really share rows
    with mesh:
        graphdef, state = nnx.split(model)
        want = common.compute_per_token_logps(
            graphdef, state, ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID, temperature=TEMP
        )
        got, _ = packed_per_token_logps(model, packed, temperature=TEMP, attention="segments", block=0)
    mask = np.asarray(ex.completion_mask)
    want, got = np.asarray(want)[mask], np.asarray(got)[mask]
    assert np.abs(want).max() > 1.0  # log-probs of a random model over 256 tokens, not zeros
    assert np.abs(got - want).max() < 1e-5


def test_sequences_never_see_each_other(tiny):
    """Changing one packed sequence leaves every other sequence's log-probs bit-for-bit alone."""
    model, mesh = tiny
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=2)
    packed, _ = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=None)
    tokens = np.asarray(packed.tokens).copy()
    seg = np.asarray(packed.segment_ids)
    row = int(np.flatnonzero(seg.max(axis=1) >= 2)[0])  # a row shared by several sequences
    col = int(np.flatnonzero(seg[row] == 1)[-1])  # last token of its first sequence; others follow it
    tokens[row, col] = (tokens[row, col] + 7) % 256
    changed = dataclasses.replace(packed, tokens=jax.numpy.asarray(tokens))
    with mesh:
        a, _ = packed_per_token_logps(model, packed, temperature=TEMP, attention="segments", block=0)
        b, _ = packed_per_token_logps(model, changed, temperature=TEMP, attention="segments", block=0)
    diff = np.abs(np.asarray(a) - np.asarray(b)).max(axis=1)
    hit = np.flatnonzero(diff > 0)
    assert hit.size == 1  # only the sequence whose token changed
    assert diff[hit[0]] > 1e-4


@pytest.mark.parametrize(("beta", "old"), [(True, True), (False, False)])
def test_loss_and_grads_packed_equal_unpacked(tiny, beta, old):
    model, mesh = tiny
    cfg = grpo_config()
    ex = random_train_example(
        PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=4, beta=beta, old_logps=old
    )
    packed, plan = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=None)
    assert plan.rows_used < len(PROMPTS)
    packed_fn = make_packed_grpo_loss_fn(attention="segments", block=0)

    def loss_and_grads(fn):
        (loss, aux), grads = nnx.value_and_grad(fn, has_aux=True)(model)
        return float(loss), aux, jax.tree.leaves(nnx.state(grads, nnx.Param))

    with mesh:
        want_loss, want_aux, want_g = loss_and_grads(
            lambda m: grpo_loss_fn(m, ex, cfg, pad_id=PAD_ID, eos_id=EOS_ID)
        )
        got_loss, got_aux, got_g = loss_and_grads(lambda m: packed_fn(m, packed, cfg))
    assert abs(got_loss - want_loss) < 1e-5
    for key in ("kl", "kl_loss", "pg_loss", "entropy", "ppo_kl"):
        assert abs(float(got_aux[key]) - float(want_aux[key])) < 1e-5, key
    assert len(got_g) == len(want_g) > 0
    assert max(float(np.abs(np.asarray(g)).max()) for g in want_g) > 1e-4  # not trivially zero
    for g, w in zip(got_g, want_g, strict=True):
        assert np.abs(np.asarray(g) - np.asarray(w)).max() < 1e-5
