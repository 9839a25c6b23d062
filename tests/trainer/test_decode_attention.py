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

from tests.trainer.test_decode import MAX_COMPLETION, MAX_PROMPT, PROMPTS, sample


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


def test_shared_prompts_counts_aligned_repeats_of_each_prompt() -> None:
    rows = np.array([[0, 5], [0, 5], [0, 5], [0, 5], [7, 8], [7, 8], [7, 8], [7, 8]])
    assert decode_attention.shared_prompts(rows) == 4
    assert decode_attention.shared_prompts(rows[:6]) == 2  # runs of 4 and 2
    assert decode_attention.shared_prompts(rows[[0, 4, 1, 5]]) == 1  # interleaved: nothing shared
    assert decode_attention.shared_prompts(rows[:1]) == 1
    assert decode_attention.shared_prompts(np.zeros((6, 3), np.int32)) == 6


def grouped_case(end: int, group: int, prompt: int) -> tuple[jax.Array, np.ndarray, np.ndarray, jax.Array]:
    """6 sequences' queries ``[6, 1, 4, 8]``, keys and values ``[6, 64, 2, 8]`` (float32, drawn with seed
    ``end``; every ``group`` consecutive sequences hold one prompt's first ``prompt`` keys and values) and
    Tunix's mask over positions ``[pad, end)``, left-padded by 2 in the first three sequences, 9 after."""
    rng = np.random.default_rng(end)
    b, s, n, kh, h = 6, 64, 4, 2, 8
    q = jnp.asarray(rng.normal(size=(b, 1, n, h)), jnp.float32)
    k = rng.normal(size=(b, s, kh, h)).astype(np.float32)
    v = rng.normal(size=(b, s, kh, h)).astype(np.float32)
    for first in range(0, b, group):  # a group's prompt keys and values: one prompt's, repeated
        k[first + 1 : first + group, :prompt] = k[first, :prompt]
        v[first + 1 : first + group, :prompt] = v[first, :prompt]
    pads = np.repeat([2, 9], 3)
    positions = np.arange(s)
    mask = jnp.asarray((positions[None, :] >= pads[:, None]) & (positions[None, :] < end))[:, None, :]
    return q, k, v, mask


@pytest.mark.parametrize("end", [17, 20, 33, 64])
def test_grouped_attention_reads_each_prompt_once_a_group(monkeypatch, end: int) -> None:
    """Two prompts x 3 sequences, prompts of 16 positions (left-padded alike within a group): the result
    is Tunix's, with NaN in every prompt position of each group's second and third sequence (read only
    from the first) and in every block past the filled ones."""
    monkeypatch.setattr(decode_attention, "BLOCK", 16)
    b, group, prompt = 6, 3, 16
    q, k, v, mask = grouped_case(end, group, prompt)
    want = tunix_attention(q, jnp.asarray(k), jnp.asarray(v), mask, 0.35)
    for first in range(0, b, group):
        k[first + 1 : first + group, :prompt] = v[first + 1 : first + group, :prompt] = np.nan
    past = prompt + -(-(end - prompt) // 16) * 16
    k[:, past:], v[:, past:] = np.nan, np.nan
    got = jax.jit(decode_attention.bounded_attention, static_argnums=(5, 6, 7))(
        q, jnp.asarray(k), jnp.asarray(v), mask, jnp.int32(end), 0.35, group, prompt
    )
    assert np.isfinite(np.asarray(got)).all()
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


# Each family's projections run in one sampler test: llama3 here (no prompt shared), qwen3 and qwen2 below.
@pytest.mark.parametrize("family", ["llama3"])
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


def sample_grouped(cluster: object, group: int) -> dict[str, np.ndarray]:
    """``test_decode.sample`` with each prompt asked ``group`` times in a row, as GRPO's learner asks."""
    return sample(cluster, [p for p in PROMPTS for _ in range(group)])


@pytest.mark.parametrize("family", ["qwen3", "qwen2"])
def test_the_sampler_reads_each_prompt_once_for_its_generations(monkeypatch, family: str) -> None:
    """Each prompt asked 3 times in a row: the decode program is compiled for groups of 3 sharing the
    16 prompt positions, and the tokens and log-probs are Tunix's (each generation its own draws)."""
    cluster = tiny_cluster(family, max_prompt=MAX_PROMPT, max_completion=MAX_COMPLETION)
    tunix = sample_grouped(cluster, 3)
    groups: set[tuple[int, int]] = set()
    real = decode_attention.bounded_attention

    def spy(*args: object) -> jax.Array:
        groups.add((args[6], args[7]))
        return real(*args)

    monkeypatch.setattr(decode_attention, "bounded_attention", spy)
    monkeypatch.setattr(decode, "BOUNDED", True)
    assert decode.install(cluster).bounded
    ours = sample_grouped(cluster, 3)
    assert groups == {(3, MAX_PROMPT)}, groups
    assert len({tuple(t) for t in tunix["tokens"][:3]}) > 1  # a prompt's generations differ
    np.testing.assert_array_equal(ours["tokens"], tunix["tokens"])
    np.testing.assert_allclose(ours["logprobs"], tunix["logprobs"], atol=1e-5)


def test_gemma3_keeps_tunix_s_decode(monkeypatch) -> None:
    """gemma3's attention (sliding window, soft-capped logits) is not the shared core: not swapped."""
    monkeypatch.setattr(decode, "BOUNDED", True)
    cluster = tiny_cluster("gemma3", max_prompt=MAX_PROMPT, max_completion=MAX_COMPLETION)
    assert decode.install(cluster) == decode.Installed(kv_layout=True, bounded=False)


def test_a_grpo_run_decodes_each_prompt_s_generations_as_one_group(monkeypatch) -> None:
    """Through the trainer (Tunix's learner repeats each prompt ``numGenerations`` times in a row, its
    rollout calls split at prompt boundaries): the sampler calls' sequences share their prompts, and the
    run trains. The built-in task asks one prompt, so all 8 sequences of a call (2 x 4) are one group."""
    from rljob_trainer.run import main as trainer_main

    from tests.trainer.test_run_grpo import job

    groups: list[int] = []
    real = decode_attention.shared_prompts
    monkeypatch.setattr(decode_attention, "shared_prompts", lambda t: groups.append(real(t)) or groups[-1])
    monkeypatch.setattr(decode, "BOUNDED", True)
    run = trainer_main.train(job(maxSteps=2, batchSize=2, beta=0.0))
    assert [r.step for r in run.recorder.reports] == [1, 2]
    assert groups == [8, 8], groups  # one sampler call a step


def test_quantize_rounds_each_vector_to_within_half_its_scale() -> None:
    x = np.random.default_rng(0).normal(size=(3, 5, 2, 16)).astype(np.float32) * 4
    x[0, 0, 0] = 0.0  # an empty vector: scale 1, integers 0
    ints, scale = decode_attention.quantize(jnp.asarray(x))
    assert ints.dtype == jnp.int8 and scale.shape == (3, 5, 2)
    back = np.asarray(ints, np.float32) * np.asarray(scale)[..., None]
    assert np.all(np.abs(back - x) <= np.asarray(scale)[..., None] / 2 * (1 + 1e-6))
    assert np.abs(np.asarray(ints)).max() == 127 and float(scale[0, 0, 0]) == 1.0


@pytest.mark.parametrize(("group", "prompt"), [(1, 0), (3, 16)])
@pytest.mark.parametrize("end", [17, 33, 64])
def test_attention_over_an_int8_cache_is_the_attention_over_its_values(
    monkeypatch, group: int, prompt: int, end: int
) -> None:
    """An int8 cache with scales (``decode.INT8_CACHE``) gives Tunix's attention over the values it
    holds (integers times scales), with every unread position NaN in both the integers' scales and,
    for the grouped case, every prompt copy past each group's first."""
    monkeypatch.setattr(decode_attention, "BLOCK", 16)
    b = 6
    q, k, v, mask = grouped_case(end, group, prompt)
    (ki, ks), (vi, vs) = decode_attention.quantize(jnp.asarray(k)), decode_attention.quantize(jnp.asarray(v))
    values = [np.asarray(i, np.float32) * np.asarray(sc)[..., None] for i, sc in ((ki, ks), (vi, vs))]
    want = tunix_attention(q, jnp.asarray(values[0]), jnp.asarray(values[1]), mask, 0.35)
    ks, vs = np.array(ks), np.array(vs)
    past = prompt + -(-(end - prompt) // 16) * 16
    for scales in (ks, vs):  # the integers cannot hold NaN: their scales do
        scales[:, past:] = np.nan
        for first in range(0, b, group):
            scales[first + 1 : first + group, :prompt] = np.nan
    got = jax.jit(decode_attention.bounded_attention, static_argnums=(5, 6, 7))(
        q, ki, vi, mask, jnp.int32(end), 0.35, group, prompt, jnp.asarray(ks), jnp.asarray(vs)
    )
    assert np.isfinite(np.asarray(got)).all()
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_the_sampler_with_an_int8_cache_prefills_exactly_and_decodes_close(monkeypatch) -> None:
    """``decode.INT8_CACHE``: the decode program reads an int8 cache (half the bytes); the prefill
    attends the prompt's own keys and values, so each sequence's first token and its log-prob are
    Tunix's; later tokens are drawn from logits computed over rounded keys and values: where a
    sequence's tokens still agree with Tunix's, their log-probs are within 0.05 (0.012 measured)."""
    cluster = tiny_cluster("qwen3", max_prompt=MAX_PROMPT, max_completion=MAX_COMPLETION)
    tunix = sample_grouped(cluster, 3)
    caches: list[object] = []
    real = decode_attention.bounded_attention

    def spy(*args: object) -> jax.Array:
        caches.append((args[1].dtype, args[8] is not None))
        return real(*args)

    monkeypatch.setattr(decode_attention, "bounded_attention", spy)
    monkeypatch.setattr(decode, "BOUNDED", True)
    monkeypatch.setattr(decode, "INT8_CACHE", True)
    assert decode.install(cluster) == decode.Installed(kv_layout=True, bounded=True, int8_cache=True)
    ours = sample_grouped(cluster, 3)
    assert set(caches) == {(np.dtype(np.int8), True)}, caches
    np.testing.assert_array_equal(ours["tokens"][:, 0], tunix["tokens"][:, 0])
    np.testing.assert_allclose(ours["logprobs"][:, 0], tunix["logprobs"][:, 0], atol=1e-6)
    agree = np.cumprod(ours["tokens"] == tunix["tokens"], axis=1).astype(bool)
    assert agree[:, 1:].any()  # some decoded tokens to compare
    np.testing.assert_array_less(np.abs(ours["logprobs"] - tunix["logprobs"])[agree], 0.05)
