"""MaxText's ``segments`` path with the head at completion columns only (``packing.maxtext_head``).

Exact against the whole-row head (MaxText's own call through ``TunixMaxTextAdapter``, head included)
within 1e-5: reference/old-policy log-probs (the jitted ``logps`` pass), GRPO loss and gradients, the
whole MaxText head and the chunked one, untied (the demo config) and tied heads, and MaxText's tied-head
extras (``normalize_embedding_logits``, logits soft cap) on the whole head. Shifting the gather by one
position breaks them (``test_shifted_gather_is_caught``).
"""

from __future__ import annotations

from types import SimpleNamespace

import jax
import numpy as np
import pytest
from flax import nnx
from rljob_trainer.models.maxtext import decoders as maxtext_models
from rljob_trainer.models.maxtext.testing import tiny_maxtext_model
from rljob_trainer.packing import head as head_module
from rljob_trainer.packing import maxtext_head
from rljob_trainer.packing.example import pack_train_example, plan_layout
from rljob_trainer.packing.logps import PackedInputs, packed_completion_logps
from rljob_trainer.packing.loss import (
    head_at_completions,
    make_packed_grpo_loss_fn,
    packed_per_token_logps,
)
from rljob_trainer.packing.testing import PAD_ID, grpo_config, random_train_example

from rljob.api.maxtext import MaxTextSpec
from rljob.api.spec import ModelSpec

ROW, MAX_P, MAX_C, TEMP, CHUNK = 32, 4, 28, 0.7, 37
PROMPTS = [4, 2, 3, 1, 4, 2, 1, 3]
COMPLETIONS = [28, 5, 20, 1, 9, 13, 2, 7]
TIED = {"logits_via_embedding": "true", "normalize_embedding_logits": "false"}
TIED_EXTRAS = {
    "logits_via_embedding": "true",
    "normalize_embedding_logits": "true",
    "final_logits_soft_cap": "2.0",
}


def _spec(overrides: dict[str, str]) -> ModelSpec:
    """The demo decoder's spec (``testing.TINY_SPEC``) with MaxText overrides on top."""
    return ModelSpec(
        backend="maxtext", size="tiny", maxtext=MaxTextSpec(modelName="qwen3-0.6b", overrides=overrides)
    )


@pytest.fixture(scope="module")
def tied():
    return tiny_maxtext_model(seed=5, spec=_spec(TIED))


@pytest.fixture(scope="module")
def tied_extras():
    return tiny_maxtext_model(seed=6, spec=_spec(TIED_EXTRAS))


def _packed(seed: int):
    ex = random_train_example(PROMPTS, COMPLETIONS, max_prompt=MAX_P, max_completion=MAX_C, seed=seed)
    p, c = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
    layout = plan_layout(p, p != PAD_ID, c, c != PAD_ID, ROW, pad_id=PAD_ID)
    assert layout.plan.rows_used < len(PROMPTS)  # rows hold several sequences
    packed, _ = pack_train_example(ex, ROW, pad_id=PAD_ID, layout=layout)
    return ex, layout, packed


def _logps(model, layout, head_at: str, chunk: int = 0, jitted: bool = True) -> np.ndarray:
    """Reference/old-policy log-probs: the trainer's jitted pass, or the same function op by op.

    Op by op for MaxText's tied head in float32: it rounds the table to bfloat16 inside a float32
    matmul, and under ``jit`` XLA's excess-precision pass drops that round trip in some programs and
    not others (measured here: the completion program 4.0e-3 off the whole-row one, 1.9e-6 with
    ``XLA_FLAGS=--xla_allow_excess_precision=false``), a difference of XLA's, not of the two heads.
    """
    kw = {"temperature": TEMP, "attention": "segments", "block": 0, "vocab_chunk": chunk}
    if jitted:
        return np.asarray(packed_completion_logps(model, [layout], head_at=head_at, **kw))
    rows = PackedInputs(**layout.device_rows())
    return np.asarray(packed_per_token_logps(model, rows, entropy=False, head_at=head_at, **kw)[0])


def _grads(model, packed, head_at: str, chunk: int = 0):
    loss = make_packed_grpo_loss_fn(attention="segments", block=0, vocab_chunk=chunk, head_at=head_at)
    (value, aux), grads = nnx.value_and_grad(lambda m: loss(m, packed, grpo_config()), has_aux=True)(model)
    return float(value), aux, jax.tree.leaves(nnx.state(grads, nnx.Param))


def _assert_same_loss(got, want) -> None:
    got_loss, got_aux, got_g = got
    want_loss, want_aux, want_g = want
    assert abs(got_loss - want_loss) < 1e-5
    for key in ("kl", "pg_loss", "entropy", "ppo_kl"):
        assert abs(float(got_aux[key]) - float(want_aux[key])) < 1e-5, key
    assert len(got_g) == len(want_g) > 0
    assert max(float(np.abs(np.asarray(g)).max()) for g in want_g) > 1e-4  # not trivially zero
    for g, w in zip(got_g, want_g, strict=True):
        assert np.abs(np.asarray(g) - np.asarray(w)).max() < 1e-5


@pytest.mark.parametrize("which", ["untied", "tied"])
def test_head_at_completions_equals_whole_rows(tiny, tied, which):
    """Log-probs (jitted reference/old pass), loss and gradients; MaxText's whole head and chunked."""
    model, mesh = tiny if which == "untied" else tied
    jitted = which == "untied"  # see _logps
    assert maxtext_head.refusal(model) is None and head_at_completions(model, "segments")
    ex, layout, packed = _packed(seed=6)
    mask = np.asarray(ex.completion_mask)
    with mesh:
        want = _logps(model, layout, "rows", jitted=jitted)
        assert np.abs(want[mask]).min() > 0 and np.abs(want).max() > 1.0
        for chunk in (0, CHUNK):
            got = _logps(model, layout, "completions", chunk, jitted=jitted)
            assert np.abs(got - want).max() < 1e-5, chunk  # padding too: 0 in both
        rows = _grads(model, packed, "rows")
        for chunk in (0, CHUNK):
            _assert_same_loss(_grads(model, packed, "completions", chunk), rows)


def test_tied_head_extras_on_the_whole_head(tied_extras):
    """MaxText's ``normalize_embedding_logits`` and soft cap come with its own ``apply_output_head``;
    the chunked head (a plain matmul) refuses them rather than dropping them."""
    model, mesh = tied_extras
    _, layout, packed = _packed(seed=7)
    with mesh:
        want = _logps(model, layout, "rows", jitted=False)
        got = _logps(model, layout, "completions", jitted=False)
        assert np.abs(got - want).max() < 1e-5
        assert np.abs(want).max() > 1.0
        _assert_same_loss(_grads(model, packed, "completions"), _grads(model, packed, "rows"))
        with pytest.raises(ValueError, match="normalize_embedding_logits"):
            _logps(model, layout, "completions", CHUNK, jitted=False)


def test_shifted_gather_is_caught(tiny, monkeypatch):
    """The check above can fail: gathering the hidden state one position off (the state that predicts
    the token itself, not the one before it) moves the log-probs far past 1e-5. Op by op: the jitted
    pass was traced (and cached) unbroken by the tests above."""
    model, mesh = tiny
    _, layout, _ = _packed(seed=6)
    real_rows = head_module.completion_rows

    def shifted(completion_index, n_tokens):
        src, slot, count = real_rows(completion_index, n_tokens)
        return src + 1, slot, count  # the gather reads src - 1: now the token's own column

    with mesh:
        want = _logps(model, layout, "rows", jitted=False)
        assert np.abs(_logps(model, layout, "completions", jitted=False) - want).max() < 1e-5
        monkeypatch.setattr(head_module, "completion_rows", shifted)
        for chunk in (0, CHUNK):
            got = _logps(model, layout, "completions", chunk, jitted=False)
            assert np.abs(got - want).max() > 1e-2, chunk


def test_compiled_pass_has_no_whole_row_logits(tiny):
    """MaxText's decoder still builds whole-row logits; under jit XLA drops them, so the compiled
    train-step gradient holds no ``[R, L, V]`` array (the whole-row head's does: the check can fail)."""
    model, mesh = tiny
    _, _, packed = _packed(seed=6)
    rows, vocab = packed.tokens.shape[0], model.base.config.vocab_size
    shape = f"f32[{rows},{ROW},{vocab}]"
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def hlo(head_at: str) -> str:
        loss = make_packed_grpo_loss_fn(attention="segments", block=0, head_at=head_at)

        def step(params, rest):  # the train step's gradient, as Tunix jits it (nnx.grad inside jit)
            grad = nnx.grad(lambda m: loss(m, packed, grpo_config())[0])
            return nnx.state(grad(nnx.merge(graphdef, params, rest)), nnx.Param)

        return jax.jit(step).lower(params, rest).compile().as_text()

    with mesh:
        assert shape in hlo("rows")
        assert shape not in hlo("completions")


def test_refused_configs_keep_the_whole_row_head(tiny):
    """A config the completion-only head cannot match falls back under ``auto`` and says why under
    ``completions`` (MaxText's own config objects; the refusal reads only the config)."""
    model, _ = tiny
    assert head_at_completions(model, "segments") and not head_at_completions(model, "segments", "rows")
    for overrides, why in [({"dropout_rate": "0.1"}, "dropout_rate"), ({"mtp_num_layers": "1"}, "mtp")]:
        cfg = maxtext_models.maxtext_config(_spec(overrides), max_target_length=64, seed=0)
        fake = type("TunixMaxTextAdapter", (), {"__module__": "maxtext.integration.tunix.tunix_adapter"})()
        fake.base = SimpleNamespace(config=cfg)
        assert not head_at_completions(fake, "segments")
        with pytest.raises(ValueError, match=why):
            head_at_completions(fake, "segments", "completions")
