"""The decode step's attention over the filled cache positions only (``rljob_trainer.decode_attention``).

The function against Tunix's attention math on caches whose unfilled positions hold NaN (a read of any
of them would show), and the sampler with it installed against Tunix's own sampler: the same tokens,
log-probs within float32 rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rljob_trainer import decode, decode_attention
from rljob_trainer.packing.testing import tiny_cluster

from tests.trainer.test_decode import MAX_COMPLETION, MAX_PROMPT, sample


def tunix_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float) -> jax.Array:
    """Tunix's grouped-query decode attention over the whole cache (``tunix/models/qwen3/model.py``)."""
    b, t, n, h = q.shape
    kh = k.shape[2]
    attn = jnp.einsum("BTHGD,BSHD->BHGTS", q.reshape(b, t, kh, n // kh, h), k) * scale
    attn = jnp.where(mask[:, None, None, :, :], attn, decode_attention.K_MASK)
    attn = jax.nn.softmax(attn.astype(jnp.float32), axis=-1).astype(k.dtype)
    return jnp.einsum("BHGTS,BSHD->BTHGD", attn, v).reshape(b, t, n, h)


def test_block_size_divides_the_cache() -> None:
    assert decode_attention.block_size(1024) == decode_attention.BLOCK == 128
    assert decode_attention.block_size(56) == 8  # the tiny sampler's cache: 16 + 40
    assert decode_attention.block_size(768, 512) == 256
    assert decode_attention.block_size(7) == 1


@pytest.mark.parametrize("end", [1, 15, 16, 17, 40, 48, 63, 64])
def test_bounded_attention_is_tunix_s_and_reads_no_block_past_the_end(monkeypatch, end: int) -> None:
    """Left-padded sequences (Tunix's mask), 4 blocks of 16: the blocks holding filled positions as
    drawn (their unfilled tail too: it is read and masked, as in Tunix's), every later block NaN, which
    any read of it would carry into the output (a zero weight times NaN is NaN)."""
    monkeypatch.setattr(decode_attention, "BLOCK", 16)
    rng = np.random.default_rng(end)
    b, s, n, kh, h = 3, 64, 4, 2, 8
    q = jnp.asarray(rng.normal(size=(b, 1, n, h)), jnp.float32)
    k = rng.normal(size=(b, s, kh, h)).astype(np.float32)
    v = rng.normal(size=(b, s, kh, h)).astype(np.float32)
    pads = np.array([0, min(3, end - 1), min(17, end - 1)])  # left padding of each sequence
    positions = np.arange(s)
    mask = jnp.asarray((positions[None, :] >= pads[:, None]) & (positions[None, :] < end))[:, None, :]
    want = tunix_attention(q, jnp.asarray(k), jnp.asarray(v), mask, 0.35)
    past = -(-end // 16) * 16  # the first position of the first block holding no filled one
    k[:, past:], v[:, past:] = np.nan, np.nan
    got = jax.jit(decode_attention.bounded_attention, static_argnums=5)(
        q, jnp.asarray(k), jnp.asarray(v), mask, jnp.int32(end), 0.35
    )
    assert np.isfinite(np.asarray(got)).all()
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("family", decode_attention.FAMILIES)
def test_the_sampler_attending_the_filled_positions_samples_tunix_s_tokens(monkeypatch, family: str) -> None:
    """The real sampler (Tunix's loop, the trainer's ``decode.install``): the decode steps run
    ``bounded_attention`` (once a layer in the traced step), the prefill does not, and the tokens and
    log-probs are Tunix's; completions cross every block of 8 of the 56-position cache."""
    cluster = tiny_cluster(family, max_prompt=MAX_PROMPT, max_completion=MAX_COMPLETION)
    tunix = sample(cluster)
    calls: list[tuple[int, ...]] = []
    real = decode_attention.bounded_attention

    def spy(q: jax.Array, *args: object) -> jax.Array:
        calls.append(q.shape)
        return real(q, *args)

    monkeypatch.setattr(decode_attention, "bounded_attention", spy)
    monkeypatch.setattr(decode, "BOUNDED", True)
    assert decode.install(cluster) == decode.Installed(kv_layout=True, bounded=True)
    ours = sample(cluster)
    layers = len(cluster.rollout._sampler.transformer.layers)
    assert len(calls) == layers and {shape[1] for shape in calls} == {1}, calls  # decode steps only
    lengths = (tunix["tokens"] != 0).sum(axis=1)
    assert lengths.max() > 32, lengths
    np.testing.assert_array_equal(ours["tokens"], tunix["tokens"])
    np.testing.assert_allclose(ours["logprobs"], tunix["logprobs"], atol=1e-5)


def test_gemma3_keeps_tunix_s_decode(monkeypatch) -> None:
    """gemma3's attention (sliding window, soft-capped logits) is not the shared core: not swapped."""
    monkeypatch.setattr(decode, "BOUNDED", True)
    cluster = tiny_cluster("gemma3", max_prompt=MAX_PROMPT, max_completion=MAX_COMPLETION)
    assert decode.install(cluster) == decode.Installed(kv_layout=True, bounded=False)
