"""The token stream (``rows.token_stream``): per-token layers on the real tokens only, attention on rows.

Exact against the row path (today's): log-probs, GRPO loss and gradients within 1e-5 on qwen3, qwen2
and llama3, blocked and dense attention, head at completions and at whole rows, whole and chunked.
A stream shifted by one token breaks them; the layers never see a padding column.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing import adapter
from rljob_trainer.packing.example import pack_train_example, plan_layout
from rljob_trainer.packing.logps import PackedInputs, packed_completion_logps
from rljob_trainer.packing.loss import make_packed_grpo_loss_fn, packed_per_token_logps
from rljob_trainer.packing.rows import ShapeCache, token_stream
from rljob_trainer.packing.testing import FORWARD_CASES, PAD_ID, grpo_config, random_train_example, tiny_model

ROW, MAX_P, MAX_C, BLOCK = 32, 4, 28, 8
PROMPTS = [4, 2, 3, 1, 4, 2, 1, 3]
COMPLETIONS = [28, 5, 20, 1, 9, 13, 2, 7]


def _layouts(example, **kw):
    """(with stream, without), padded to 6 rows as a run's ``ShapeCache`` would after a bigger batch."""
    p, c = np.asarray(example.prompt_ids), np.asarray(example.completion_ids)
    make = lambda stream: plan_layout(  # noqa: E731
        p,
        p != PAD_ID,
        c,
        c != PAD_ID,
        ROW,
        pad_id=PAD_ID,
        attention_block=BLOCK,
        stream=stream,
        shapes=ShapeCache(shapes=[(6, 64)]),
        **kw,
    )
    return make(True), make(False)


def _grads(fn, model):
    """Loss, aux and gradients compiled as one program, as the learner's train step is (op by op, the
    six cases took 1.4x as long: each control-flow op compiled on its own, on every call)."""
    (loss, aux), grads = nnx.jit(nnx.value_and_grad(fn, has_aux=True))(model)
    return float(loss), aux, jax.tree.leaves(nnx.state(grads, nnx.Param))


def test_token_stream_maps_real_slots_both_ways():
    seg = np.array([[1, 1, 2, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    index, of_slot = token_stream(seg, granule=4)
    assert index.tolist() == [0, 1, 2, 4, 5, 6, 7, 12]  # 7 real tokens, padded to 8 (the zero at R * L)
    assert of_slot.tolist() == [0, 1, 2, 8, 3, 4, 5, 6, 8, 8, 8, 8]  # padding slots read the zero at S
    values = np.arange(12) + 100
    stream = np.r_[values, 0][index]  # what _move gathers: the appended zero at R * L
    assert stream.tolist() == [100, 101, 102, 104, 105, 106, 107, 0]
    assert np.r_[stream, 0][of_slot].tolist() == [
        *[100, 101, 102, 0],
        *[104, 105, 106, 107],
        *[0, 0, 0, 0],
    ]
    assert token_stream(np.zeros((2, 4), int), granule=4)[0].size == 4  # never an empty stream


def test_stream_sizes_reuse_within_a_bucket_step_and_grow_exactly():
    cache = ShapeCache()  # stream_bits 3: buckets 16, 18, 20, ... (steps of 1/8 above 8 granules)
    assert [cache.fit_stream(n) for n in (19, 19, 20, 18, 17, 9, 8)] == [19, 19, 20, 18, 18, 9, 8]
    # 19 twice: one size; 20 is past 19; 18's bucket is 18, so 19 is too big for it; 17 reuses 18.
    assert cache.streams == [19, 20, 18, 9, 8]


def test_no_stream_where_it_would_skip_no_row():
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=6)
    p, c = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
    layout = plan_layout(
        p, p != PAD_ID, c, c != PAD_ID, ROW, pad_id=PAD_ID, attention_block=BLOCK, stream=True
    )
    assert layout.plan.num_rows == 4 and int((layout.segment_ids > 0).sum()) > 3 * ROW
    assert layout.stream is None and "stream_index" not in layout.device_rows()


def test_stream_needs_a_single_data_shard():
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=6)
    with pytest.raises(ValueError, match="single data shard"):
        _layouts(ex, row_multiple=2)


# Where the head runs and its vocabulary chunk, one per case in turn: every family x attention case checks
# the stream against the rows, and every head, blocked and dense alike, runs on two families (all three
# heads on every case took ~8 min of a cold CI run for what the layers' code does not depend on).
HEADS = [("completions", 0), ("completions", 37), ("rows", 37)]
STREAM_CASES = [(*case, HEADS[i % len(HEADS)]) for i, case in enumerate(FORWARD_CASES)]


@pytest.mark.parametrize(
    ("family", "attention", "overrides", "head"),
    STREAM_CASES,
    ids=[f"{f}-{a}-{h}-{c}" for f, a, _, (h, c) in STREAM_CASES],
)
def test_stream_equals_rows(family, attention, overrides, head):
    """Reference/old log-probs and loss + gradients, the head at completions or at rows, whole or chunked."""
    model = tiny_model(family, seed=4, **overrides)
    cfg = grpo_config()
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=6)
    stream, rows = _layouts(ex)
    index, _ = stream.stream
    real = int((rows.segment_ids > 0).sum())
    assert rows.segment_ids.shape == (6, ROW) and real < index.size == 4 * ROW  # skips 2 padding rows
    with_stream, _ = pack_train_example(ex, ROW, pad_id=PAD_ID, layout=stream)
    without, _ = pack_train_example(ex, ROW, pad_id=PAD_ID, layout=rows)
    assert without.stream_index is None
    mask = np.asarray(ex.completion_mask)
    head_at, chunk = head
    kw = {
        "temperature": 0.7,
        "attention": attention,
        "block": BLOCK,
        "vocab_chunk": chunk,
        "head_at": head_at,
    }
    got = np.asarray(packed_completion_logps(model, [stream], **kw))
    want = np.asarray(packed_completion_logps(model, [rows], **kw))
    assert np.abs(want[mask]).min() > 0
    assert np.abs(got - want).max() < 1e-5, (head_at, chunk)

    loss = make_packed_grpo_loss_fn(attention=attention, block=BLOCK, vocab_chunk=chunk, head_at=head_at)
    got_loss, got_aux, got_g = _grads(lambda m: loss(m, with_stream, cfg), model)
    want_loss, want_aux, want_g = _grads(lambda m: loss(m, without, cfg), model)
    assert abs(got_loss - want_loss) < 1e-5
    for key in ("kl", "pg_loss", "entropy", "ppo_kl"):
        assert abs(float(got_aux[key]) - float(want_aux[key])) < 1e-5, key
    assert max(float(np.abs(np.asarray(g)).max()) for g in want_g) > 1e-4
    for g, w in zip(got_g, want_g, strict=True):
        assert np.abs(np.asarray(g) - np.asarray(w)).max() < 1e-5


def test_stream_shifted_by_one_token_is_caught():
    model = tiny_model("qwen3", seed=4)
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=6)
    stream, rows = _layouts(ex)
    index, of_slot = stream.stream
    real = int((rows.segment_ids > 0).sum())
    shifted = index.copy()
    shifted[:real] = np.maximum(index[:real] - 1, 0)  # each stream token reads the slot before its own
    broken = dataclasses.replace(stream, stream=(shifted, of_slot))
    kw = {"temperature": 0.7, "attention": "blocked", "block": BLOCK, "head_at": "completions"}
    want = np.asarray(packed_completion_logps(model, [rows], **kw))
    assert np.abs(np.asarray(packed_completion_logps(model, [stream], **kw)) - want).max() < 1e-5
    assert np.abs(np.asarray(packed_completion_logps(model, [broken], **kw)) - want).max() > 1e-3


def test_layers_never_see_a_padding_column(monkeypatch):
    """Every decoder layer runs on ``[1, S]`` stream tokens, ``S`` = real tokens rounded up to a row."""
    model = tiny_model("qwen3", seed=4)
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=6)
    stream, rows = _layouts(ex)
    seen = []
    decoder = adapter._decoder

    def spy(model, x, attn_fn, split_last=False):
        seen.append(x.shape[:2])
        return decoder(model, x, attn_fn, split_last)

    monkeypatch.setattr(adapter, "_decoder", spy)
    kw = {"temperature": 0.7, "attention": "blocked", "block": BLOCK, "head_at": "completions"}
    for layout in (stream, rows):  # traced here, not through a cached jit
        jax.eval_shape(
            lambda layout=layout: packed_per_token_logps(model, PackedInputs(**layout.device_rows()), **kw)
        )
    real = int((rows.segment_ids > 0).sum())
    assert seen == [(1, 4 * ROW), (6, ROW)] and real > 3 * ROW
