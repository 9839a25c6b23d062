"""Chunked vocabulary head (``packing.head``): packed log-probs, GRPO loss and gradients == Tunix unpacked.

The chunk sizes below do not divide the token count, so the padded last chunk is exercised too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.packing import loss as loss_module
from rljob_trainer.packing.example import plan_layout
from rljob_trainer.packing.head import (
    CHUNK_ABOVE_VOCAB,
    CHUNK_TOKENS,
    SPLASH_CHUNK_TOKENS,
    auto_vocab_chunk,
    chunked_token_logps,
    head_weight,
)
from rljob_trainer.packing.learner import PackedGRPOLearner
from rljob_trainer.packing.logps import packed_completion_logps
from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
from rljob_trainer.packing.testing import (
    EOS_ID,
    PAD_ID,
    VOCAB,
    grpo_config,
    length_reward,
    random_train_example,
    tiny_cluster,
    tiny_model,
)
from tunix.rl import common
from tunix.rl.algo_core import grpo_loss_fn

ROW, MAX_P, MAX_C, BLOCK = 32, 4, 28, 8
PROMPTS = [4, 2, 3, 1, 4, 2, 1, 3]
COMPLETIONS = [28, 5, 20, 1, 9, 13, 2, 7]


def test_chunked_token_logps_equal_log_softmax():
    rng = np.random.default_rng(0)
    hidden = jnp.asarray(rng.normal(size=(3, 11, 16)), jnp.float32)
    weight = jnp.asarray(rng.normal(size=(300, 16)), jnp.float32)
    targets = jnp.asarray(rng.integers(0, 300, (3, 11)))
    logp_all = jax.nn.log_softmax((hidden @ weight.T) / 0.7, axis=-1)
    want = np.asarray(jnp.take_along_axis(logp_all, targets[..., None], axis=-1)[..., 0])
    want_ent = np.asarray(-jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1))
    for chunk in (1, 7, 33, 64):
        got, ent = chunked_token_logps(hidden, targets, weight, temperature=0.7, chunk=chunk, entropy=True)
        assert got.shape == targets.shape
        assert np.abs(np.asarray(got) - want).max() < 1e-5, chunk
        assert np.abs(np.asarray(ent) - want_ent).max() < 1e-5, chunk


@pytest.mark.parametrize(
    ("family", "attention", "overrides"),
    [
        ("qwen3", "blocked", {}),
        ("qwen3", "dense", {"use_tied_embedding": False}),
        ("qwen2", "blocked", {}),
        ("llama3", "blocked", {"weight_tying": False}),
    ],
)
def test_chunked_head_logps_equal_unpacked(family, attention, overrides):
    model = tiny_model(family, seed=5, **overrides)
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=3)
    p, c = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
    layout = plan_layout(p, p != PAD_ID, c, c != PAD_ID, ROW, pad_id=PAD_ID, attention_block=BLOCK)
    assert layout.plan.rows_used < len(PROMPTS)  # rows hold several sequences
    got = np.asarray(
        packed_completion_logps(
            model, [layout], temperature=0.7, attention=attention, block=BLOCK, vocab_chunk=37
        )
    )
    graphdef, state = nnx.split(model)
    want = np.asarray(
        common.compute_per_token_logps(
            graphdef, state, ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID, temperature=0.7
        )
    )
    mask = np.asarray(ex.completion_mask)
    assert got.shape == want.shape
    assert np.abs(np.where(mask, got - want, 0.0)).max() < 1e-5
    assert np.abs(want[mask]).min() > 0


@pytest.mark.parametrize(("family", "attention"), [("qwen3", "blocked"), ("llama3", "dense")])
def test_chunked_head_loss_and_grads_equal_unpacked(grpo_case, family, attention):
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=2)
    case = grpo_case(family, ex, row=ROW, attention_block=BLOCK)
    case.assert_loss_and_grads_equal_unpacked(
        make_packed_grpo_loss_fn(attention=attention, block=BLOCK, vocab_chunk=50),
        aux=("kl", "pg_loss", "entropy", "ppo_kl"),
    )


def test_head_weight_is_what_the_model_multiplies_by():
    for family, overrides in (("qwen3", {}), ("qwen3", {"use_tied_embedding": False}), ("llama3", {})):
        model = tiny_model(family, seed=2, **overrides)
        x = jnp.ones((1, 1, model.config.embed_dim))
        tied = overrides.get("use_tied_embedding", True)
        want = model.embedder.decode(x) if tied else model.lm_head(x)
        assert np.abs(np.asarray(x[0, 0] @ head_weight(model).T - want[0, 0])).max() < 1e-5


def test_auto_vocab_chunk():
    big = CHUNK_ABOVE_VOCAB + 1
    assert auto_vocab_chunk("qwen3", 151936, "blocked") == CHUNK_TOKENS == 256
    assert auto_vocab_chunk("llama3", big, "dense") == CHUNK_TOKENS
    assert auto_vocab_chunk("qwen3", CHUNK_ABOVE_VOCAB, "blocked") == 0  # small vocabulary: whole head
    # splash stops at the norm too; on the TPU four times larger chunks trained 6% faster (docs/tpu.md)
    assert auto_vocab_chunk("qwen2", big, "splash") == SPLASH_CHUNK_TOKENS == 1024
    assert auto_vocab_chunk("gemma3", big, "dense") == 0  # no forward that stops at the final norm
    assert auto_vocab_chunk("maxtext", big, "segments") == 0


def test_trainer_learner_chunks_a_large_vocabulary(monkeypatch):
    """The trainer builds ``PackedGRPOLearner`` without ``vocab_chunk``: the learner picks it from the
    actor model, and its train loss fn and reference/old passes run the chunked head; a small
    vocabulary keeps the whole head. Values stay Tunix's."""
    chunks = []
    real = loss_module.chunked_token_logps

    def spy(*args, **kwargs):
        chunks.append(kwargs["chunk"])
        return real(*args, **kwargs)

    monkeypatch.setattr(loss_module, "chunked_token_logps", spy)
    ex = random_train_example(PROMPTS[:4], COMPLETIONS[:4], max_prompt=MAX_P, max_completion=MAX_C, seed=1)
    for vocab, want in ((CHUNK_ABOVE_VOCAB + 1, CHUNK_TOKENS), (VOCAB, 0)):
        cluster = tiny_cluster("qwen3", max_prompt=MAX_P, max_completion=MAX_C, vocab_size=vocab)
        tunix_old = cluster.get_old_per_token_logps
        learner = PackedGRPOLearner(
            rl_cluster=cluster,
            algo_config=grpo_config(),
            reward_fns=[length_reward],
            row_tokens=ROW,
            attention_block=BLOCK,
        )
        assert learner.vocab_chunk == want
        chunks.clear()
        old = np.asarray(cluster.get_old_per_token_logps(ex.prompt_ids, ex.completion_ids))
        packed, _ = learner.pack(ex)
        trainer = cluster.actor_trainer
        loss, _ = trainer.loss_fn(trainer.model, packed, grpo_config())
        assert chunks == ([want, want] if want else [])  # the old-policy pass, then the train loss
        mask = np.asarray(ex.completion_mask)
        want_old = np.asarray(tunix_old(ex.prompt_ids, ex.completion_ids))
        assert np.abs(np.where(mask, old - want_old, 0.0)).max() < 1e-5
        want_loss = grpo_loss_fn(trainer.model, ex, grpo_config(), pad_id=PAD_ID, eos_id=EOS_ID)[0]
        assert abs(float(loss) - float(want_loss)) < 1e-5
