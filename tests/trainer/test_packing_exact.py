"""Packed per-token log-probs == unpacked (Tunix's own forward) within 1e-5, every family and backend."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing.adapter import BLOCKED_FAMILIES, DENSE_FAMILIES, resolve_attention
from rljob_trainer.packing.attention import block_pairs, blocked_attention, dense_attention
from rljob_trainer.packing.example import pack_train_example
from rljob_trainer.packing.loss import packed_per_token_logps
from rljob_trainer.packing.rows import RowTooShortError
from rljob_trainer.packing.testing import EOS_ID, PAD_ID, random_train_example, tiny_model
from tunix.rl import common

from tests.trainer.tolerance import within

ROW, MAX_P, MAX_C, BLOCK, TEMP = 32, 4, 28, 8, 0.9
CASES = {
    # (prompt lengths, completion lengths)
    "mixed_with_exact_fill": ([4, 2, 3, 1, 4, 2], [28, 5, 20, 1, 9, 13]),
    "many_tiny": ([1] * 12, [1, 2, 1, 3, 1, 1, 2, 1, 1, 1, 2, 1]),
    "trailing_padding": ([3, 2], [4, 6]),
    "single": ([4], [17]),
}


def unpacked_logps(model, ex):
    graphdef, state = nnx.split(model)
    return common.compute_per_token_logps(
        graphdef, state, ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID, temperature=TEMP
    )


@pytest.fixture(scope="module", params=DENSE_FAMILIES)
def model(request):
    return tiny_model(request.param, seed=3)


@pytest.mark.parametrize("case", sorted(CASES))
def test_packed_logps_equal_unpacked(model, case):
    prompts, completions = CASES[case]
    ex = random_train_example(prompts, completions, max_prompt=MAX_P, max_completion=MAX_C, seed=len(case))
    want = np.asarray(unpacked_logps(model, ex))
    mask = np.asarray(ex.completion_mask)
    attentions = ["dense", *(["blocked"] if resolve_attention(model) == "blocked" else [])]
    for attention in attentions:
        packed, plan = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=BLOCK)
        assert plan.rows_used <= len(prompts)
        got, _ = packed_per_token_logps(model, packed, temperature=TEMP, attention=attention, block=BLOCK)
        got = np.asarray(got)
        err = np.abs(np.where(mask, got - want, 0.0)).max()
        assert within(err, 1e-5), (attention, err)
        assert np.abs(want[mask]).min() > 0  # the comparison is not vacuous


def test_auto_attention_is_blocked_on_cpu_where_supported():
    for family in DENSE_FAMILIES:
        expected = "blocked" if family in BLOCKED_FAMILIES else "dense"
        assert resolve_attention(tiny_model(family)) == expected
    flash = tiny_model("qwen3", use_flash_attention=True)
    assert resolve_attention(flash) == "splash"
    with pytest.raises(ValueError, match="must be 'splash'"):  # the flash path ignores attention masks
        resolve_attention(flash, "blocked")


@pytest.mark.parametrize("attention", ["blocked", "dense"])
def test_sequences_never_see_each_other(attention):
    """Editing ANY sequence of a shared row (first, middle or last: causality alone protects only the
    last) changes no other sequence's log-probs and none of its own before the edit."""
    model = tiny_model("qwen3")
    ex = random_train_example([2, 3, 2], [10, 6, 7], max_prompt=MAX_P, max_completion=MAX_C, seed=1)
    packed, plan = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=BLOCK)
    assert plan.rows_used == 1 and sorted(plan.segment.tolist()) == [1, 2, 3]
    logps = jax.jit(
        lambda m, p: packed_per_token_logps(m, p, temperature=1.0, attention=attention, block=BLOCK)[0]
    )
    base = np.asarray(logps(model, packed))
    for i in range(3):
        for edit in (0, 3):  # a prompt token (all completion log-probs follow it), a completion token
            p_ids, c_ids = np.asarray(ex.prompt_ids).copy(), np.asarray(ex.completion_ids).copy()
            if edit == 0:
                p_ids[i, -1] = (p_ids[i, -1] + 7) % 250 + 2  # last prompt token: conditions every logp
            else:
                c_ids[i, edit] = (c_ids[i, edit] + 7) % 250 + 2
            ex2 = ex.replace(prompt_ids=jnp.asarray(p_ids), completion_ids=jnp.asarray(c_ids))
            packed2, plan2 = pack_train_example(ex2, ROW, pad_id=PAD_ID, attention_block=BLOCK)
            assert np.array_equal(plan2.offset, plan.offset)  # same places, so only attention can leak
            diff = np.abs(np.asarray(logps(model, packed2)) - base)
            others = [j for j in range(3) if j != i]
            assert diff[others].max() == 0.0, (i, edit)
            assert diff[i, :edit].max(initial=0.0) == 0.0 and diff[i, edit:].max() > 0, (i, edit)


@pytest.mark.parametrize("seed", range(4))
def test_blocked_attention_equals_dense(seed):
    rng = np.random.default_rng(seed)
    R, L, N, K, D, block = 3, 64, 4, 2, 8, 16
    seg = np.zeros((R, L), np.int32)
    for r in range(R):
        col, s = 0, 1
        while col < L - 1 and rng.random() < 0.9:
            n = int(rng.integers(1, L - col + 1))
            seg[r, col : col + n] = s
            col, s = col + n, s + 1
    bp = block_pairs(seg, block)
    pairs = tuple(jnp.asarray(a) for a in (bp.row, bp.q, bp.k, bp.valid))
    q, k, v = (jnp.asarray(rng.normal(size=(R, L, h, D)), jnp.float32) for h in (N, K, K))

    def f(q, k, v, blocked):
        if blocked:
            return blocked_attention(q, k, v, jnp.asarray(seg), pairs, block=block, scale=D**-0.5)
        return dense_attention(q, k, v, jnp.asarray(seg), scale=D**-0.5)

    real = (seg > 0)[..., None, None]
    got, want = f(q, k, v, True), f(q, k, v, False)
    assert within(np.abs(np.where(real, got - want, 0)).max(), 1e-5)
    w = jnp.asarray(rng.normal(size=got.shape), jnp.float32) * real
    g1 = jax.grad(lambda *a: (f(*a, True) * w).sum(), argnums=(0, 1, 2))(q, k, v)
    g2 = jax.grad(lambda *a: (f(*a, False) * w).sum(), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g1, g2, strict=True):
        assert within(np.abs(np.asarray(a) - np.asarray(b)).max(), 1e-5)
    assert bp.count <= R * (L // block) * (L // block + 1) // 2


def test_too_long_sequence_raises_naming_the_field():
    ex = random_train_example([4, 2], [28, 3], max_prompt=MAX_P, max_completion=MAX_C)
    with pytest.raises(RowTooShortError, match=r"spec\.packing\.maxSeqTokenPerTpu"):
        pack_train_example(ex, 31, pad_id=PAD_ID)
