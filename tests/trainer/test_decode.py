"""The sampler's decode loop in segments (``rljob_trainer.decode``) samples what Tunix's own loop samples.

Each family's tiny model through its real ``RLCluster`` vanilla rollout (Tunix's ``Sampler``), prompts of
different lengths (left padding), top-p sampling with a seed, completions long enough to cross every
segment: the tokens must be Tunix's and their log-probs equal within float32 rounding (Tunix returns
logits only for models with ``num_embed``, which Qwen3 lacks).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rljob_trainer import decode, decode_attention
from rljob_trainer.packing.testing import EOS_ID, FAMILIES, PAD_ID, tiny_cluster

PROMPTS = ["a", "bcdefg", "hij klm nop", "q"]  # the tiny tokenizer: one id a character
MAX_PROMPT, MAX_COMPLETION = 16, 40


def test_segment_ends_split_the_completion_evenly() -> None:
    assert decode.segment_ends(256, 1024, 4) == [448, 640, 832, 1024]
    assert decode.segment_ends(256, 1024, segments=1) == [1024]
    assert decode.segment_ends(10, 12, 4) == [11, 12]  # no empty piece
    assert decode.segment_ends(100, 101, 4) == [101]
    assert decode.segment_ends(256, 1024) == [1024]  # decode.SEGMENTS: off by default
    assert decode.peak_cache_factor(256, 1024, 4) == pytest.approx(1 + 832 / 1024)
    assert decode.peak_cache_factor(100, 101, 4) == decode.peak_cache_factor(256, 1024) == 1


def sample(cluster: object, prompts: list[str] | None = None) -> dict[str, np.ndarray]:
    """The cluster's sampler on ``prompts`` (default: ``PROMPTS`` twice over), top-p with a fixed seed."""
    sampler = cluster.rollout._sampler
    out = sampler(
        input_strings=PROMPTS * 2 if prompts is None else prompts,
        max_generation_steps=MAX_COMPLETION,
        max_prompt_length=MAX_PROMPT,
        temperature=0.9,
        top_p=0.95,
        seed=7,
        eos_tokens=[EOS_ID, PAD_ID],
        return_logprobs=True,
        pad_output=True,
    )
    return {
        "tokens": np.stack([np.asarray(t) for t in out.tokens]),
        "logprobs": np.stack([np.asarray(x) for x in out.logprobs]),
    }


# The pieces cut Tunix's decode loop, not the model, so two families cover it: qwen3 with the bounded
# decode attention (the default) and gemma3 with Tunix's own (its sliding window). Off by default
# (decode.SEGMENTS); the other two families' runs took ~38 s of CI for no other path.
@pytest.mark.parametrize("family", ["qwen3", "gemma3"])
def test_segmented_decode_samples_tunix_s_tokens(family: str) -> None:
    cluster = tiny_cluster(family, max_prompt=MAX_PROMPT, max_completion=MAX_COMPLETION)
    size = cluster.rollout._sampler.cache_config.cache_size
    assert decode.segment_ends(MAX_PROMPT, size, 4) == [26, 36, 46, 56]  # three pieces shorter than the cache
    tunix = sample(cluster)
    assert decode.install(cluster, segments=4)
    ours = sample(cluster)
    lengths = (tunix["tokens"] != PAD_ID).sum(axis=1)
    assert lengths.max() > 30, lengths  # some completion reaches the last piece
    np.testing.assert_array_equal(ours["tokens"], tunix["tokens"])
    np.testing.assert_allclose(ours["logprobs"], tunix["logprobs"], atol=1e-5)


def test_timing_reports_every_prefill_and_decode_call_with_its_iterations() -> None:
    """``install(timing=)`` (the trainer passes ``StepRecorder.add_sampler_call``): one report per program
    call, the decode's with the loop's iterations: one a token after the prompt, until every completion
    has ended or ``max_generation_steps`` ran (the tiny random model never samples EOS here)."""
    cluster = tiny_cluster("qwen3", max_prompt=MAX_PROMPT, max_completion=MAX_COMPLETION)
    calls: list[tuple[str, float, int]] = []
    assert decode.install(cluster, timing=lambda *call: calls.append(call))
    out = sample(cluster)
    sample(cluster)
    assert [c[0] for c in calls] == ["prefill", "decode"] * 2
    assert all(seconds > 0 for _, seconds, _ in calls)
    assert calls[0][2] == calls[2][2] == 0  # prefill: no decode iteration
    assert not (out["tokens"] == EOS_ID).any()  # so the loop ran to its limit
    assert calls[1][2] == calls[3][2] == MAX_COMPLETION, calls


def _kv_layouts(state: object) -> set[tuple[int, ...]]:
    """The physical orders (major to minor) of a sampling state's key and value caches."""
    leaves = jax.tree_util.tree_leaves_with_path(state)
    return {leaf.format.layout.major_to_minor for path, leaf in leaves if decode._is_kv(path, leaf)}


def _fresh_layouts(state: object) -> set[tuple[int, ...]]:
    """The orders the backend gives new arrays of a sampling state's cache shapes (its default layouts)."""
    leaves = jax.tree_util.tree_leaves_with_path(state)
    return {
        jnp.zeros(leaf.shape, leaf.dtype).format.layout.major_to_minor
        for path, leaf in leaves
        if decode._is_kv(path, leaf)
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_prefill_and_decode_keep_the_cache_in_kv_layout_and_sample_tunix_s_tokens(family: str) -> None:
    """The trainer's sampler (``install``, one piece as by default) hands the cache from the prefill to the
    decode in ``decode.KV_LAYOUT``, the order Tunix's attention reads it in, so XLA need not copy it into
    that order and back (a second cache of temporaries on a TPU: ``bench/tpu_aot.py decode``); the tokens
    and log-probs are Tunix's (the layout is physical only)."""
    cluster = tiny_cluster(family, max_prompt=MAX_PROMPT, max_completion=MAX_COMPLETION)
    tunix = sample(cluster)
    bounded = family in decode_attention.FAMILIES  # their decode attention too (decode.BOUNDED, the default)
    assert decode.install(cluster) == decode.Installed(kv_layout=True, bounded=bounded)
    sampler = cluster.rollout._sampler
    seen: list[tuple[str, set[tuple[int, ...]]]] = []
    fresh: list[set[tuple[int, ...]]] = []  # the layouts the backend gives new arrays of the caches' shapes

    def spy(part: str, program: object) -> object:
        def run(params: object, state: object, *args: object, **kwargs: object) -> object:
            seen.append((f"{part} in", _kv_layouts(state)))
            fresh.append(_fresh_layouts(state))
            out = program(params, state, *args, **kwargs)
            seen.append((f"{part} out", _kv_layouts(out)))
            return out

        return run

    sampler._compiled_prefill_fn = spy("prefill", sampler._compiled_prefill_fn)
    sampler._compiled_decode_fn = spy("decode", sampler._compiled_decode_fn)
    ours = sample(cluster)
    kv = decode.KV_LAYOUT.major_to_minor
    assert kv == (0, 2, 1, 3)  # [B, S, K, H] stored [B, K, S, H]
    # the prompt's fresh cache arrives in the backend's default layout for its shape (CPU: (0, 1, 2, 3); the
    # TPU gave the tiny models' caches (0, 2, 3, 1) on 2026-12-07) and is laid out once, in the prefill's call
    assert seen[0] == ("prefill in", fresh[0]), (seen, fresh)
    assert seen[1:] == [("prefill out", {kv}), ("decode in", {kv}), ("decode out", {kv})], seen
    np.testing.assert_array_equal(ours["tokens"], tunix["tokens"])
    np.testing.assert_allclose(ours["logprobs"], tunix["logprobs"], atol=1e-5)
