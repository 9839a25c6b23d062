"""Packed training compiles a bounded number of shapes, however the lengths vary from step to step.

Why this matters: every new ``[rows, L]`` / block-pair shape recompiles the whole train step (10-50 s on
CPU for the tiny demo model). Before ``rows.ShapeCache`` the demo recompiled at most steps. These tests
count the compilations of a jitted packed GRPO step (``_cache_size()`` of the jitted function) over steps
with different length mixes, and check the padded shapes keep the loss and gradients exact.
"""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st
from rljob_trainer.models import rope
from rljob_trainer.packing.example import pack_train_example
from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
from rljob_trainer.packing.rows import ShapeCache, bucket_rows
from rljob_trainer.packing.testing import EOS_ID, PAD_ID, grpo_config, random_train_example, tiny_model
from tunix.rl.algo_core import grpo_loss_fn

ROW, MAX_P, MAX_C, BLOCK, BATCH = 64, 4, 60, 16, 16
NB = ROW // BLOCK


def length_mixes(steps: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per step: prompt and completion lengths of ``BATCH`` sequences, from a different mix each step
    (mostly short, mostly long, uniform, bimodal), like completions drifting during GRPO training."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(steps):
        kind = s % 4
        if kind == 0:
            c = rng.integers(1, 16, BATCH)
        elif kind == 1:
            c = rng.integers(30, MAX_C + 1, BATCH)
        elif kind == 2:
            c = rng.integers(1, MAX_C + 1, BATCH)
        else:
            c = np.where(
                rng.random(BATCH) < 0.5, rng.integers(1, 8, BATCH), rng.integers(40, MAX_C + 1, BATCH)
            )
        out.append((rng.integers(1, MAX_P + 1, BATCH), c))
    return out


def grads_of(model_state, graphdef, fn):
    def loss(state):
        return fn(nnx.merge(graphdef, state))

    (value, _), grads = jax.value_and_grad(loss, has_aux=True)(model_state)
    return value, grads


def test_packed_step_compiles_a_bounded_number_of_times_and_stays_exact():
    # Tunix's own rotation, not the frequencies an earlier test's checkpoint installed (rope.install is
    # process state: after test_data_sources this test failed by 5e-4)
    rope.restore("qwen3")
    model = tiny_model("qwen3", seed=1)
    graphdef, state = nnx.split(model)
    cfg = grpo_config()
    packed_loss = make_packed_grpo_loss_fn(attention="blocked", block=BLOCK)

    @jax.jit
    def packed_step(state, ex):
        return grads_of(state, graphdef, lambda m: packed_loss(m, ex, cfg))

    @jax.jit
    def unpacked_step(state, ex):
        return grads_of(state, graphdef, lambda m: grpo_loss_fn(m, ex, cfg, pad_id=PAD_ID, eos_id=EOS_ID))

    steps = 12  # three rounds of the four mixes
    cache = ShapeCache(max_pairs_per_row=NB * (NB + 1) // 2)
    bucketed_shapes, compiles = set(), []
    for i, (p, c) in enumerate(length_mixes(steps)):
        ex = random_train_example(p, c, max_prompt=MAX_P, max_completion=MAX_C, seed=i)
        packed, plan = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=BLOCK, shapes=cache)
        assert packed.tokens.shape[0] == plan.num_rows >= plan.rows_used
        plain, _ = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=BLOCK)
        bucketed_shapes.add((plain.tokens.shape, plain.pair_row.shape))
        got_loss, got_g = packed_step(state, packed)
        compiles.append(packed_step._cache_size())
        # Padding rows and invalid pairs change nothing: still Tunix's unpacked loss and gradients.
        want_loss, want_g = unpacked_step(state, ex)
        assert abs(float(got_loss) - float(want_loss)) < 1e-5
        for g, w in zip(jax.tree.leaves(got_g), jax.tree.leaves(want_g), strict=True):
            assert np.abs(np.asarray(g) - np.asarray(w)).max() < 1e-5
    # Without the cache these steps compile once per distinct bucketed shape (8 here)...
    assert len(bucketed_shapes) >= 8, bucketed_shapes
    # ... with it: one compile per cached shape, at most 5 although rows needed range 3..16, and none in
    # the last round of mixes (every mix already has a shape).
    assert compiles[-1] == len(cache.shapes) <= 5, (compiles, cache.shapes)
    assert compiles[steps - 5] == compiles[-1], compiles
    assert unpacked_step._cache_size() == 1


@st.composite
def needs(draw):
    multiple_of = draw(st.integers(1, 4))
    per_row = draw(st.sampled_from([0, 3, 10]))
    steps = draw(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 10)), min_size=1, max_size=30))
    # pairs needed <= rows used * max pairs per row, as block_pairs guarantees
    return multiple_of, per_row, [(r, min(r * per_row, r * k) if per_row else 0) for r, k in steps]


@settings(max_examples=300, deadline=None)
@given(needs())
def test_shape_cache_fits_every_need_and_adds_shapes_only_by_its_rules(case):
    multiple_of, per_row, steps = case
    cache = ShapeCache(multiple_of=multiple_of, max_pairs_per_row=per_row)
    for rows, pairs in steps:
        before = list(cache.shapes)
        r, p = cache.fit(rows, pairs, max_rows=200)
        assert r >= rows and p >= pairs and r % multiple_of == 0
        assert not per_row or p <= max(r * per_row, pairs)
        holding = [s for s in before if s[0] >= rows and s[1] >= pairs]
        want = min(bucket_rows(rows, multiple_of=multiple_of), cache._round(200))
        if holding and min(holding)[0] <= 2 * want:
            assert (r, p) == min(holding) and cache.shapes == before  # reused: no new compile
        elif before and max(br for br, _ in before) > 2 * want:
            # A much smaller need: a smaller shape, power-of-two rows (one per doubling).
            assert r == cache._round(1 << (max(rows, 1) - 1).bit_length())
        else:
            # The new shape covers every earlier one (the envelope only grows).
            assert all(r >= br and p >= bp for br, bp in before)
            assert r == max([want, *(br for br, _ in before)])
        assert r <= 2 * want
    # Same needs again: never a new shape.
    n = len(cache.shapes)
    for rows, pairs in steps:
        cache.fit(rows, pairs, max_rows=200)
    assert len(cache.shapes) == n
