"""Token-budget micro-batches (``accumulate``, ``chunks``): a micro-batch whose tokens exceed the budget
runs every actor-side pass in chunks, one chunk's activations at a time, and the optimizer update is
still the unsplit one.

Tested the way the trainer runs it: whole GRPO steps through Tunix's learner loop (reference, old-policy
and train passes, two iterations, micro-batches), the parameters after the step compared with the same
learner without a budget (1e-5), for packed rows (blocked and dense attention) and unpacked sequences,
under three of Tunix's loss aggregations (all five are linear in the per-token loss: ``accumulate``).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing import accumulate
from rljob_trainer.packing import chunks as chunks_module
from rljob_trainer.packing.chunks import chunk_layout, rows_per_chunk
from rljob_trainer.packing.example import plan_layout
from rljob_trainer.packing.learner import PackedGRPOLearner
from rljob_trainer.packing.testing import (
    PAD_ID,
    grpo_config,
    length_reward,
    random_train_example,
    tiny_cluster,
)
from rljob_trainer.packing.unpacked import UnpackedGRPOLearner

MAX_P, MAX_C, ROW = 8, 24, 32
PROMPTS = np.array(["ab", "cde", "f", "ghij"])


def run_step(make, loss_agg_mode="sequence-mean-token-mean", **learner_kwargs):
    """One global step: 4 prompts x 2 generations, mini-batch 2 (two updates), micro-batch 2, two
    GRPO iterations, beta 0.04. Returns the parameters after it and the learner."""
    cluster = tiny_cluster(
        "qwen3", max_prompt=MAX_P, max_completion=MAX_C, mini_batch=2, micro_batch=2, beta=0.04
    )
    cfg = grpo_config(num_iterations=2, loss_agg_mode=loss_agg_mode)
    learner = make(rl_cluster=cluster, algo_config=cfg, reward_fns=[length_reward], **learner_kwargs)
    learner.train([{"prompts": PROMPTS}])
    params = [np.asarray(p) for p in jax.tree.leaves(nnx.state(cluster.actor_trainer.model, nnx.Param))]
    return params, learner


def assert_same_update(got, want):
    for p, q in zip(got, want, strict=True):
        assert np.abs(p - q).max() < 1e-5


@pytest.mark.parametrize(
    ("attention", "loss_agg_mode"),
    [
        ("blocked", "sequence-mean-token-mean"),  # Tunix's default aggregation
        ("blocked", "token-mean"),
        ("blocked", "seq-mean-token-sum"),
        ("dense", "sequence-mean-token-mean"),
    ],
)
def test_packed_step_in_chunks_makes_the_unsplit_update(monkeypatch, attention, loss_agg_mode):
    counts = []
    real = chunks_module.chunk_layout

    def spy(layout, rows, **kw):
        out = real(layout, rows, **kw)
        counts.append((len(out.part), int(out.part.any(axis=1).sum())))  # (chunks, chunks holding rows)
        return out

    monkeypatch.setattr("rljob_trainer.packing.learner.chunk_layout", spy)
    # rows of 64 hold 1-3 sequences of up to 32 tokens: micro-batches of 4 use fewer than the 4 chunks
    # of one row that max_chunks allows, so padding chunks are skipped too
    kw = dict(row_tokens=2 * ROW, attention=attention, vocab_chunk=0)
    want, _ = run_step(PackedGRPOLearner, loss_agg_mode, **kw)
    got, learner = run_step(PackedGRPOLearner, loss_agg_mode, token_budget=2 * ROW, **kw)
    assert learner.chunk_rows == 1
    assert {c for c, _ in counts} == {4}, counts  # one chunk count, so one compiled shape (max_chunks)
    assert min(u for _, u in counts) >= 2, counts  # the budget did cut the micro-batches
    assert any(u < c for c, u in counts), counts  # and empty chunks were skipped
    assert_same_update(got, want)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean"])  # the packed cases cover the others
def test_unpacked_step_in_chunks_makes_the_unsplit_update(monkeypatch, loss_agg_mode):
    calls = []
    real = accumulate.accumulated_loss
    monkeypatch.setattr(
        "rljob_trainer.packing.unpacked.accumulated_loss",
        lambda model, chunks, parts, *a: calls.append(parts.shape) or real(model, chunks, parts, *a),
    )
    want, _ = run_step(UnpackedGRPOLearner, loss_agg_mode, vocab_chunk=7)
    got, learner = run_step(
        UnpackedGRPOLearner, loss_agg_mode, vocab_chunk=7, token_budget=3 * (MAX_P + MAX_C)
    )
    assert learner.per_chunk == 3
    assert calls and all(shape == (2, 4) for shape in calls), calls  # 4 sequences: chunks of 3 + 1
    assert_same_update(got, want)


def test_a_chunk_loss_with_its_own_normaliser_is_caught(monkeypatch):
    """Normalising each chunk by its own tokens (what a naive split does) changes the update."""
    from rljob_trainer.packing import loss as loss_module

    real = loss_module.grpo_loss_from_logps

    def own_mask(lp, ent, ex, cfg, part=None):
        if part is None:
            return real(lp, ent, ex, cfg)
        return real(lp, ent, ex.replace(completion_mask=ex.completion_mask * part[:, None]), cfg, part=part)

    kw = dict(row_tokens=ROW, attention="blocked", vocab_chunk=0)
    want, _ = run_step(PackedGRPOLearner, **kw)
    monkeypatch.setattr(loss_module, "grpo_loss_from_logps", own_mask)
    jax.clear_caches()
    try:
        got, _ = run_step(PackedGRPOLearner, token_budget=ROW, **kw)
    finally:
        jax.clear_caches()
    assert max(float(np.abs(p - q).max()) for p, q in zip(got, want, strict=True)) > 1e-5


def test_chunk_layout_keeps_every_sequence_whole_in_one_chunk():
    ex = random_train_example(
        [8, 3, 5, 1, 6, 2, 7], [24, 9, 2, 17, 20, 5, 11], max_prompt=MAX_P, max_completion=MAX_C, seed=1
    )
    args = (ex.prompt_ids, ex.prompt_mask, ex.completion_ids, ex.completion_mask, ROW)
    layout = plan_layout(*args, pad_id=PAD_ID, attention_block=8, row_multiple=2)
    out = chunk_layout(layout, 2, row_multiple=2, attention_block=8)
    count = len(out.part)
    assert count == -(-layout.plan.rows_used // 2) and out.tokens.shape == (count, 2, ROW)
    assert (out.part.sum(0) == 1).all()  # each sequence in exactly one chunk
    flat = layout.tokens.reshape(-1)
    mask = np.asarray(ex.completion_mask).astype(bool)
    for c in range(count):
        mine = out.part[c].astype(bool)
        idx = out.completion_index[c]
        assert (idx[~mine] == 0).all()
        # the completion tokens read from the chunk are the ones the unchunked layout holds
        got = out.tokens[c].reshape(-1)[idx[mine]]
        want = flat[layout.completion_index[mine]]
        assert np.array_equal(got[mask[mine]], want[mask[mine]])
    assert out.pairs.row.shape[0] == count and int(out.tokens.astype(bool).sum()) == int(
        flat.astype(bool).sum()
    )
    assert chunk_layout(layout, layout.plan.rows_used) is layout  # one chunk holds it: unchanged
    padded = chunk_layout(layout, 2, count=count + 2, row_multiple=2, attention_block=8)
    assert padded.tokens.shape == (count + 2, 2, ROW) and not padded.part[count:].any()
    assert not padded.tokens[count:].any() and not padded.completion_index[count:].any()
    assert np.array_equal(padded.tokens[:count], out.tokens)
    # the rows the passes compute (the packing stats' "compute" figure): the used chunks' rows, the empty
    # rows of a used chunk included, the padding chunks not (skipped at run time)
    rows = -(-layout.plan.rows_used // 2) * 2
    assert padded.computed_rows == out.computed_rows == rows
    assert layout.computed_rows == layout.plan.num_rows
    wide = chunk_layout(layout, 6, count=2, row_multiple=2, attention_block=8)  # 4 rows used
    assert layout.plan.rows_used == 4 and wide.computed_rows == 6


def test_max_chunks_bounds_any_micro_batch():
    # 64 sequences of up to 1,024 tokens in rows of 8,192, chunks of 2 rows (the v5e example on one chip):
    # best-fit leaves at most one row half empty, so <= 2 * 8 + 1 = 17 rows: 9 chunks.
    assert chunks_module.max_chunks(64, 1024, 8192, 2) == 9
    assert chunks_module.max_chunks(4, 32, 32, 1) == 4  # never more rows than sequences


def test_rows_per_chunk():
    # as few rows as hold chunks.MIN_CHUNK_TOKENS (2,048), at most the budget's
    assert rows_per_chunk(8192, 512) == 4
    assert rows_per_chunk(8192, 512, row_multiple=4) == 16  # per chip, over 4 data-parallel chips
    assert rows_per_chunk(1000, 256) == 3  # the budget holds fewer
    assert rows_per_chunk(1000, 2048) == 1  # a row is the least a chip can hold
    # issue 40's small shape on the chip: a budget of 4 rows of 2,048 made chunks of 4 for micro-batches
    # using 2, computing 2 empty rows every pass; one row a chunk computes only the rows used
    assert rows_per_chunk(4 * 2048, 2048) == 1
    assert rows_per_chunk(18_524, 8192) == 1


def test_token_budget_requested_or_from_free_hbm(monkeypatch):
    from rljob_trainer import memory
    from rljob_trainer.packing.testing import tiny_model

    model = tiny_model("qwen3")
    assert memory.token_budget(4096, model) == 4096  # the RLJob's value wins
    assert memory.free_hbm_bytes() is None and memory.token_budget(None, model) is None  # CPU: no limit
    monkeypatch.setattr(memory, "free_hbm_bytes", lambda: 8 * 2**30)
    cfg = model.config
    per_token = memory.bytes_per_token(cfg)
    assert per_token == 4 * (cfg.num_layers * cfg.embed_dim + 4 * (3 * cfg.hidden_dim + 4 * cfg.embed_dim))
    assert memory.token_budget(None, model) == int(memory.BUDGET_SHARE * 8 * 2**30) // per_token


def test_rollout_prompts_fit_the_kv_cache_in_free_hbm(monkeypatch):
    from rljob_trainer import memory
    from rljob_trainer.packing.testing import tiny_model

    model = tiny_model("qwen3")
    assert memory.rollout_prompts(16, 8, 8, 1024, model) is None  # CPU: no memory statistics
    per_seq = memory.kv_bytes_per_sequence(model.config, 1024, 4)  # the tiny model computes in float32
    cfg = model.config
    assert per_seq == 1024 * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * 4
    # a call's peak is its cache and the decode program's temporaries (one more cache): 2 caches a call
    free = int(2 * 3 * 8 * per_seq / memory.ROLLOUT_SHARE) + 1
    monkeypatch.setattr(memory, "free_hbm_bytes", lambda: free)
    assert memory.rollout_prompts(16, 8, 8, 1024, model) == 2  # 3 fit; the largest divisor of 16 is 2
    assert memory.rollout_prompts(16, 2, 8, 1024, model) is None  # the micro-batch itself fits
    # the segmented decode's peak (the whole cache and a piece's copy) counted: 6 / 2.5 = 2.4 prompts fit,
    # 6 / 3.1 = 1.9
    assert memory.rollout_prompts(16, 8, 8, 1024, model, cache_factor=1.5) == 2
    assert memory.rollout_prompts(16, 8, 8, 1024, model, cache_factor=2.1) == 1


def test_rollout_prompts_count_the_decode_temporaries_as_the_chip_did(monkeypatch):
    """On one v5e chip, 8 prompts x 8 generations a call (Qwen3-0.6B, 1,024 positions, a 7.0 GiB bf16
    cache) failed to load the decode program: 7.26 GiB of temporaries asked with 4.31 GiB free. With the
    chip's 11.31 GiB free after the training state, the sizing must not choose that call at any share
    that leaves room for the training beside it, and must keep the 4 prompts the chip ran at 9.05 GiB.
    With the caches in ``decode.KV_LAYOUT`` the same chip loaded 8 prompts a call (11.65 GiB peak)."""
    import types

    from rljob_trainer import memory

    qwen3_0p6b = types.SimpleNamespace(
        config=types.SimpleNamespace(num_layers=28, num_kv_heads=8, head_dim=128, dtype="bfloat16")
    )
    cache = 64 * memory.kv_bytes_per_sequence(qwen3_0p6b.config, 1024)
    assert round(cache / 2**30, 2) == 7.0
    monkeypatch.setattr(memory, "free_hbm_bytes", lambda: int(11.31 * 2**30))
    assert memory.rollout_prompts(16, 8, 8, 1024, qwen3_0p6b) == 4  # the default share: the chip's run
    # the caches in decode.KV_LAYOUT: the same chip loaded and ran 8 prompts a call (micro: None)
    assert memory.rollout_prompts(16, 8, 8, 1024, qwen3_0p6b, kv_layout=True) is None
    assert memory.rollout_prompts(16, 16, 8, 1024, qwen3_0p6b, kv_layout=True) == 8
    for share in (0.75, 0.9, 1.0):  # 0.75: the share whose 8 prompts a call failed on the chip
        monkeypatch.setattr(memory, "ROLLOUT_SHARE", share)
        assert memory.rollout_prompts(16, 8, 8, 1024, qwen3_0p6b) == 4, share
