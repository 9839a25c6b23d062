"""The vocabulary head at completion columns only (``head.completion_head_logps``), packed and unpacked.

Exact against the whole-row head (today's path) and against Tunix's own unpacked functions: log-probs,
GRPO loss and gradients within 1e-5 on qwen3, qwen2 and llama3, blocked and dense attention, tied and
untied heads, whole and chunked (chunked: the last layer's MLP and the final norm at the gathered states
too, ``adapter.last_layer_tail``). Shifting the gather by one column breaks every one of them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing import loss as loss_module
from rljob_trainer.packing.example import PackedTrainExample, pack_train_example, plan_layout
from rljob_trainer.packing.head import chunked_token_logps, completion_rows
from rljob_trainer.packing.head_loop import counted_map
from rljob_trainer.packing.logps import (
    PackedInputs,
    packed_completion_logps,
    unpacked_completion_logps,
    unpacked_inputs,
)
from rljob_trainer.packing.loss import head_at_completions, make_packed_grpo_loss_fn
from rljob_trainer.packing.testing import (
    EOS_ID,
    FORWARD_CASES,
    PAD_ID,
    grpo_config,
    random_train_example,
    tiny_model,
)
from tunix.rl import common
from tunix.rl.algo_core import grpo_loss_fn

from tests.trainer.tolerance import within

ROW, MAX_P, MAX_C, BLOCK = 32, 4, 28, 8
PROMPTS = [4, 2, 3, 1, 4, 2, 1, 3]
COMPLETIONS = [28, 5, 20, 1, 9, 13, 2, 7]


def _grads(fn, model):
    """Loss, aux and gradients compiled as one program, as the learner's train step is (op by op, each
    control-flow op of the chunked head compiles on its own, on every call)."""
    (loss, aux), grads = nnx.jit(nnx.value_and_grad(fn, has_aux=True))(model)
    return float(loss), aux, jax.tree.leaves(nnx.state(grads, nnx.Param))


def _assert_same_loss(got, want):
    got_loss, got_aux, got_g = got
    want_loss, want_aux, want_g = want
    assert within(abs(got_loss - want_loss), 1e-5)
    for key in ("kl", "pg_loss", "entropy", "ppo_kl"):
        assert within(abs(float(got_aux[key]) - float(want_aux[key])), 1e-5), key
    assert max(float(np.abs(np.asarray(g)).max()) for g in want_g) > 1e-4  # not trivially zero
    for g, w in zip(got_g, want_g, strict=True):
        assert within(np.abs(np.asarray(g) - np.asarray(w)).max(), 1e-5)


def test_completion_rows_front_packs_real_tokens():
    index = jnp.asarray([[5, 6, 0], [9, 0, 0], [12, 13, 14]], jnp.int32)
    src, slot, count = completion_rows(index, n_tokens=16)
    assert src.shape == (9,)  # min(B * Tc, R * L)
    assert np.asarray(src).tolist() == [5, 6, 9, 12, 13, 14, 0, 0, 0]
    assert np.asarray(slot).tolist() == [[0, 1, -1], [2, -1, -1], [3, 4, 5]]
    assert int(count) == 6
    src, _, _ = completion_rows(index, n_tokens=7)  # fewer row slots than [B, Tc] cells
    assert np.asarray(src).tolist() == [5, 6, 9, 12, 13, 14, 0]


def test_chunked_head_skips_chunks_past_the_count():
    rng = np.random.default_rng(0)
    hidden = jnp.asarray(rng.normal(size=(20, 8)), jnp.float32)
    weight = jnp.asarray(rng.normal(size=(50, 8)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, 50, 20))
    want, want_ent = chunked_token_logps(hidden, targets, weight, chunk=4, entropy=True)
    got, ent = chunked_token_logps(hidden, targets, weight, chunk=4, entropy=True, count=jnp.int32(9))
    assert within(np.abs(np.asarray(got[:12] - want[:12])).max(), 1e-6)  # chunks 0-2 hold rows < 9
    assert within(np.abs(np.asarray(ent[:12] - want_ent[:12])).max(), 1e-6)
    assert not np.asarray(got[12:]).any() and not np.asarray(ent[12:]).any()  # chunks 3-4 skipped


def test_counted_map_skips_chunks_past_the_count():
    """``head_loop.counted_map`` (the last layer's MLP and norm at the gathered states): ``fn`` on the
    chunks below the count, 0 past it; gradients, the closed-over weight's included, == autodiff."""
    rng = np.random.default_rng(2)
    x, a = (jnp.asarray(rng.normal(size=(20, 8)), jnp.float32) for _ in range(2))
    w = jnp.asarray(rng.normal(size=(8, 8)), jnp.float32)

    def objective(x, w, count):
        def fn(h):
            return jnp.tanh(h @ w) + h

        y = fn(x) if count is None else counted_map(fn, x, count, 4)
        return jnp.sum(a[:12] * y[:12]), y

    (gx, gw), y = jax.grad(objective, argnums=(0, 1), has_aux=True)(x, w, jnp.int32(9))
    (wx, ww), want = jax.grad(objective, argnums=(0, 1), has_aux=True)(x, w, None)
    assert within(np.abs(np.asarray(y[:12] - want[:12])).max(), 1e-6)  # chunks 0-2 hold rows < 9
    assert not np.asarray(y[12:]).any()  # chunks 3-4 skipped
    assert within(np.abs(np.asarray(gx - wx)).max(), 1e-5)
    assert within(np.abs(np.asarray(gw - ww)).max(), 1e-5)
    assert np.abs(np.asarray(gw)).max() > 1e-2


@pytest.mark.parametrize("terms", ["logp+entropy", "logp", "entropy"])
def test_counted_head_gradients_equal_autodiff(terms):
    """``head_loop``'s hand-written backward (log-prob and entropy terms, temperature) == autodiff of the
    ``lax.map`` head, on the rows below ``count``; rows past it get no gradient. "logp": entropies are
    computed but only returned beside the loss, as in GRPO's train step (their cotangent is a symbolic
    zero, which the backward skips); "entropy": the log-probs' cotangent is the symbolic zero."""
    rng = np.random.default_rng(1)
    hidden = jnp.asarray(rng.normal(size=(20, 8)), jnp.float32)
    weight = jnp.asarray(rng.normal(size=(50, 8)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, 50, 20))
    a, b = (jnp.asarray(rng.normal(size=20), jnp.float32) for _ in range(2))

    def objective(count):
        def f(x, w):
            logp, ent = chunked_token_logps(
                x, targets, w, temperature=0.7, chunk=4, entropy=True, count=count
            )
            lp, en = jnp.sum(a[:12] * logp[:12]), jnp.sum(b[:12] * ent[:12])
            return {"logp+entropy": lp + en, "logp": lp, "entropy": en}[terms], (logp, ent)

        return jax.grad(f, argnums=(0, 1), has_aux=True)(hidden, weight)[0]

    (gx, gw), (wx, ww) = objective(jnp.int32(9)), objective(None)
    # Different log-sum-exps on the two sides: the chip's log error does not cancel (tolerance.py).
    assert within(np.abs(np.asarray(gx[:12] - wx[:12])).max(), 1e-5, log_paths_differ=True)
    assert within(np.abs(np.asarray(gw - ww)).max(), 1e-5, log_paths_differ=True)
    assert np.abs(np.asarray(ww)).max() > 1e-3
    assert not np.asarray(gx[12:]).any()


# The head whole (0) or in chunks of 37 tokens: each family x attention case once, each chunking on tied
# and untied heads and on blocked and dense attention (FORWARD_CASES: tied, untied, untied, tied, ...).
HEAD_CASES = [(*case, chunk) for case, chunk in zip(FORWARD_CASES, (0, 37, 37, 0, 0, 37), strict=True)]


@pytest.mark.parametrize(
    ("family", "attention", "overrides", "chunk"),
    HEAD_CASES,
    ids=[f"{f}-{a}-{c}" for f, a, _, c in HEAD_CASES],
)
def test_head_at_completions_equals_whole_rows(family, attention, overrides, chunk):
    """Packed rows: reference/old log-probs, loss and gradients, the head whole or chunked (37 tokens)."""
    model = tiny_model(family, seed=4, **overrides)
    cfg = grpo_config()
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=6)
    p, c = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
    layout = plan_layout(p, p != PAD_ID, c, c != PAD_ID, ROW, pad_id=PAD_ID, attention_block=BLOCK)
    assert layout.plan.rows_used < len(PROMPTS)  # rows hold several sequences
    packed, _ = pack_train_example(ex, ROW, pad_id=PAD_ID, layout=layout)
    mask = np.asarray(ex.completion_mask)
    kw = {"temperature": 0.7, "attention": attention, "block": BLOCK, "vocab_chunk": chunk}
    got = np.asarray(packed_completion_logps(model, [layout], head_at="completions", **kw))
    want = np.asarray(packed_completion_logps(model, [layout], head_at="rows", **kw))
    assert within(np.abs(got - want).max(), 1e-5), chunk  # padding too: 0 in both
    assert np.abs(want[mask]).min() > 0

    def fn(head_at):
        loss = make_packed_grpo_loss_fn(attention=attention, block=BLOCK, vocab_chunk=chunk, head_at=head_at)
        return lambda m: loss(m, packed, cfg)

    _assert_same_loss(_grads(fn("completions"), model), _grads(fn("rows"), model))


@pytest.mark.parametrize(
    ("family", "overrides"), [("qwen3", {}), ("qwen2", {}), ("llama3", {"weight_tying": False})]
)
def test_unpacked_head_at_completions_equals_tunix(family, overrides):
    """Tunix's unpacked layout, head at completion columns: == ``compute_per_token_logps`` and
    ``grpo_loss_fn`` (Tunix's head over every column)."""
    model = tiny_model(family, seed=7, **overrides)
    cfg = grpo_config()
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=8)
    graphdef, state = nnx.split(model)
    want = np.asarray(
        common.compute_per_token_logps(
            graphdef, state, ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID, temperature=0.7
        )
    )
    mask = np.asarray(ex.completion_mask)
    for chunk in (0, 37):
        got = np.asarray(
            unpacked_completion_logps(
                model, ex.prompt_ids, ex.completion_ids, pad_id=PAD_ID, temperature=0.7, vocab_chunk=chunk
            )
        )
        assert within(np.abs(np.where(mask, got - want, 0.0)).max(), 1e-5), chunk
    rows = unpacked_inputs(ex.prompt_ids, ex.completion_ids, PAD_ID)
    unpacked = PackedTrainExample(
        tokens=rows.tokens,
        positions=rows.positions,
        segment_ids=rows.segment_ids,
        completion_index=rows.completion_index,
        kv_segment_ids=rows.kv_segment_ids,
        completion_mask=ex.completion_mask,
        advantages=ex.advantages,
        ref_per_token_logps=ex.ref_per_token_logps,
        old_per_token_logps=ex.old_per_token_logps,
    )
    loss = make_packed_grpo_loss_fn(attention="dense", block=0, vocab_chunk=37, head_at="completions")
    _assert_same_loss(
        _grads(lambda m: loss(m, unpacked, cfg), model),
        _grads(lambda m: grpo_loss_fn(m, ex, cfg, pad_id=PAD_ID, eos_id=EOS_ID), model),
    )


def test_prompt_columns_never_reach_the_head(monkeypatch):
    """The chunked head receives only the states predicting completion tokens, real ones first."""
    seen = {}

    def spy(x, targets, weight, **kwargs):
        seen.update(x=x, targets=targets, count=kwargs["count"])
        return chunked_token_logps(x, targets, weight, **kwargs)

    monkeypatch.setattr(loss_module, "chunked_token_logps", spy)
    model = tiny_model("qwen3", seed=1)
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=2)
    packed, plan = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=BLOCK)
    rows = PackedInputs(**{k: getattr(packed, k) for k in PackedInputs.__dataclass_fields__})
    loss_module.packed_per_token_logps(
        model, rows, temperature=1.0, attention="blocked", block=BLOCK, entropy=False, vocab_chunk=16
    )
    mask = np.asarray(ex.completion_mask)
    n = int(mask.sum())
    assert seen["x"].shape[0] == min(mask.size, plan.num_rows * ROW) and int(seen["count"]) == n
    completions = np.asarray(ex.completion_ids)[mask]  # [B, Tc] order, real tokens only
    assert np.array_equal(np.asarray(seen["targets"])[:n], completions)


def test_head_at_is_auto_where_the_forward_stops_at_the_norm():
    assert head_at_completions(tiny_model("qwen3"), "blocked")
    assert head_at_completions(tiny_model("llama3"), "dense")
    assert not head_at_completions(tiny_model("qwen3"), "blocked", "rows")
    assert not head_at_completions(tiny_model("gemma3"), "dense")  # the model's own call, head included
    with pytest.raises(ValueError, match="head at completions"):
        head_at_completions(tiny_model("gemma3"), "dense", "completions")
    with pytest.raises(ValueError, match="head_at"):
        head_at_completions(tiny_model("qwen3"), "blocked", "prompts")
