"""A decode step's attention that reads only the cache positions filled so far (issue 41).

Tunix's sampler decodes every sequence of a call in lockstep, and each decode step's attention is an
einsum over the whole cache (``prompt + completion`` positions) with a mask over the positions not yet
written. The cache is most of the bytes a decode step reads (7.5 of 8.7 GB a step at the v5e example's
64 sequences x 1,024 positions of Qwen3-0.6B), while at step ``t`` only the first ``prompt + t + 1``
positions can hold keys and values (69% of the cache on average there).

``bounded_attention`` computes the same attention over the shortest prefix of the cache, in whole
blocks of ``BLOCK`` positions, that holds every filled position: one branch of a ``lax.switch`` a layer,
each branch a static slice of the cache (one compiled program serves every step; the branch is picked on
the device). Positions past that prefix are never read (the last block's unfilled tail is, and masked, as
Tunix masks it). Compiled for v5e (``bench/tpu_aot.py decode``), XLA reads each slice inside the matmul
that uses it: no copy of a slice or of the cache. On the chip this form decoded 2-4% faster than two
loops over the filled blocks (scores, then values; commit 00599ae, docs/tpu.md) and replaced them.

GRPO asks the sampler for ``G`` completions of each prompt, and Tunix's learner repeats each prompt ``G``
times in a row, so a call's cache holds each prompt's keys and values ``G`` times. Where the call's own
padded prompts show such groups (``shared_prompts``, checked on the host per call; the decode program is
compiled once per group size), the prompt positions are read once a group, from its first sequence, for
all of its queries: at the v5e example (8 generations, prompt 384 of 1,024 positions) a decode step then
reads ~42% of the cache's bytes on average ((384 / 8 + 384) / 1,024 with blocks of 128) instead of 100%
(Tunix) or ~75% (blocks alone). The cache
itself is unchanged (each sequence's prompt copy is still written by the prefill and never read).

The numbers: every score is Tunix's (the same products and scale, the same mask value) and so is the
softmax over the prefix (Tunix's positions past it carry the masked value, whose weight is exactly 0);
the sums run over fewer positions (and the shared prompt's part apart, in float32), so the output may
differ from Tunix's in the last bit (the tokens and log-probs of ``tests/trainer/test_decode_attention.py``).

``install`` swaps the decode step's attention of the families that share Tunix's grouped-query core
(qwen3, qwen2, llama3) for this one, only while ``bounded`` is on in the calling thread (the sampler's
decode program is traced inside it; the prefill, the learner and the prewarm thread keep Tunix's block).
On by default (``decode.BOUNDED``) since the chip timed it (docs/tpu.md, 2026-12-07).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# Positions a block holds (the largest power of two at most this that divides the part of the cache read
# per sequence: see ``block_size``). Smaller blocks read less past the filled positions and compile more
# branches: at the v5e example (prompt 384, cache 1,024) blocks of 128 read 75% of the cache on average,
# of 256 80%, of 512 90%. With shared prompts the blocks divide the completion part (640 positions there:
# blocks of 128 at any BLOCK from 128 up; on the chip, ``bench/tpu.py --decode-block 256`` compiled the
# same program); blocks of 64 decoded slower there, 7.94 against 7.17 ms a step: more, smaller matmuls).
BLOCK = 128
# Tunix's masked score (every family's ``K_MASK``)
K_MASK = -2.3819763e38
# The families whose attention module has Tunix's grouped-query core (gemma3 adds a sliding window and
# logit soft-capping: it keeps Tunix's decode).
FAMILIES = ("qwen3", "qwen2", "llama3")

_ON = threading.local()


def block_size(cache_size: int, block: int | None = None) -> int:
    """The largest power of two at most ``block`` (``BLOCK``) dividing ``cache_size``; 1 at worst."""
    size = BLOCK if block is None else block
    while cache_size % size:
        size //= 2
    return size


def bounded_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None,
    end: jax.Array,
    scale: float,
    group: int = 1,
    prompt: int = 0,
    k_scale: jax.Array | None = None,
    v_scale: jax.Array | None = None,
) -> jax.Array:
    """Tunix's decode attention over positions ``[0, end)`` of the cache only.

    ``q`` ``[B, T, N, H]`` (the step's queries, rotated), ``k`` / ``v`` ``[B, S, K, H]`` (the caches,
    this step's key and value written), ``mask`` ``[B, T, S]`` (Tunix's: True where a query may attend),
    ``end`` a scalar: every position the mask allows is below it. Returns ``[B, T, N, H]``.

    ``group`` > 1 with ``prompt`` > 0: every ``group`` consecutive sequences share their first ``prompt``
    positions (GRPO's generations of one prompt, ``shared_prompts``), so those positions are read once a
    group, from the group's first sequence, for all its queries; the rest in whole blocks as above.

    ``k_scale`` / ``v_scale`` ``[B, S, K]``: ``k`` and ``v`` are a quantized cache (``decode.INT8_CACHE``), each
    position's value ``k * k_scale``; the scales multiply the scores and the weights instead.
    """
    s = k.shape[1]
    shared = prompt if group > 1 else 0
    block = block_size(s - shared)
    branches = [
        functools.partial(_prefix_attention, length=shared + i * block, shared=shared, group=group)
        for i in range(1, (s - shared) // block + 1)
    ]
    blocks = jnp.clip((end - shared + block - 1) // block, 1, len(branches))
    return jax.lax.switch(blocks - 1, branches, q, k, v, mask, scale, k_scale, v_scale)


def _prefix_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None,
    scale: float,
    k_scale: jax.Array | None,
    v_scale: jax.Array | None,
    *,
    length: int,
    shared: int,
    group: int,
) -> jax.Array:
    """Tunix's attention over the cache's first ``length`` positions (a static slice: ``bounded_attention``
    picks the shortest that holds every filled one), the first ``shared`` read once a ``group``."""
    b, t, n, h = q.shape
    kh = k.shape[2]
    q = q.reshape(b, t, kh, n // kh, h)
    rows = slice(None, None, group)  # each group's first sequence: the one whose prompt is read
    scores = jnp.einsum("BTHGD,BSHD->BHGTS", q, _values(k, q.dtype, slice(None), shared, length)) * scale
    scores = _scaled(scores, k_scale, slice(None), shared, length)
    if shared:
        qp = q.reshape(b // group, group, t, kh, n // kh, h)
        part = jnp.einsum("PGTHQD,PSHD->PGHQTS", qp, _values(k, q.dtype, rows, 0, shared)) * scale
        part = _scaled(part.reshape(b, kh, n // kh, t, shared), k_scale, rows, 0, shared, group)
        scores = jnp.concatenate([part, scores], axis=-1)
    if mask is not None:
        scores = jnp.where(mask[:, None, None, :, :length], scores, K_MASK)
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1)
    weights = _scaled(probs[..., shared:], v_scale, slice(None), shared, length).astype(q.dtype)
    out = jnp.einsum(
        "BHGTS,BSHD->BTHGD",
        weights,
        _values(v, q.dtype, slice(None), shared, length),
        preferred_element_type=jnp.float32,
    )
    if shared:
        pp = _scaled(probs[..., :shared], v_scale, rows, 0, shared, group).astype(q.dtype)
        pp = pp.reshape(b // group, group, kh, n // kh, t, shared)
        part = jnp.einsum(
            "PGHQTS,PSHD->PGTHQD",
            pp,
            _values(v, q.dtype, rows, 0, shared),
            preferred_element_type=jnp.float32,
        )
        out = out + part.reshape(out.shape)
    return out.astype(q.dtype).reshape(b, t, n, h)


def _values(cache: jax.Array, dtype: Any, rows: slice, start: int, stop: int) -> jax.Array:
    """``cache[rows, start:stop]`` in the queries' ``dtype`` (a quantized cache's integers converted inside
    the matmul that reads them; a cache in that dtype already is read as it is)."""
    part = cache[rows, start:stop]
    return part if part.dtype == dtype else part.astype(dtype)


def _scaled(
    x: jax.Array, scales: jax.Array | None, rows: slice, start: int, stop: int, group: int = 1
) -> jax.Array:
    """``x`` ``[B, K, Q, T, S]`` (scores or weights over positions ``start:stop``) times each position's
    scale (``scales[rows, start:stop]``, ``[B', S, K]``, each row serving ``group`` sequences); unchanged
    without scales (a cache in the model's dtype)."""
    if scales is None:
        return x
    per = jnp.repeat(scales[rows, start:stop], group, axis=0) if group > 1 else scales[rows, start:stop]
    return x * jnp.transpose(per, (0, 2, 1))[:, :, None, None, :]


def decode_step(
    attn: Any, q: jax.Array, k: jax.Array, v: jax.Array, cache: dict[str, jax.Array], mask: jax.Array | None
) -> tuple[dict[str, jax.Array], jax.Array]:
    """A decode step's attention block after the projections, as Tunix's: this step's key and value
    written at ``end_index``, the attention over the filled positions, ``o_proj``; the new cache."""
    new = _written(cache, k, v)
    end = jnp.minimum(cache["end_index"][0] + q.shape[1], new["k"].shape[1])
    group, prompt = getattr(_ON, "shared", (1, 0))
    scales = (new["k_scale"], new["v_scale"]) if "k_scale" in new else (None, None)
    out = bounded_attention(q, new["k"], new["v"], mask, end, attn.scale, group, prompt, *scales)
    return new, attn.o_proj(out)


def prefill_step(
    attn: Any, q: jax.Array, k: jax.Array, v: jax.Array, cache: dict[str, jax.Array], mask: jax.Array | None
) -> tuple[dict[str, jax.Array], jax.Array]:
    """A prefill's attention block into a quantized cache (``decode.INT8_CACHE``): the prompt's keys and values
    written quantized, its attention over the keys and values just computed (not their quantized copy),
    which are the cache's only filled positions: Tunix's sampler prefills an empty cache from position 0,
    so Tunix's attention over the whole cache, the positions past the prompt masked, is this one."""
    new = _written(cache, k, v)
    length = k.shape[1]
    out = _prefix_attention(q, k, v, mask, attn.scale, None, None, length=length, shared=0, group=1)
    return new, attn.o_proj(out)


def _written(cache: dict[str, jax.Array], k: jax.Array, v: jax.Array) -> dict[str, jax.Array]:
    """``cache`` with ``k`` and ``v`` ``[B, T, K, H]`` written at its ``end_index`` (quantized, with their
    scales, where the cache is), and that index moved past them."""
    end_index = cache["end_index"][0]
    at = (0, end_index % cache["v"].shape[1], 0, 0)
    new = {"end_index": cache["end_index"] + k.shape[1]}
    for name, x in (("k", k), ("v", v)):
        if f"{name}_scale" in cache:
            x, scale = quantize(x)
            new[f"{name}_scale"] = jax.lax.dynamic_update_slice(cache[f"{name}_scale"], scale, at[:3])
        new[name] = jax.lax.dynamic_update_slice(cache[name], x, at)
    return new


def quantize(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``x`` ``[..., H]`` as int8 and a float32 scale per vector (``[...]``): ``x ~ int8 * scale``, each
    vector's largest magnitude mapped to 127 (rounded to nearest: the error at most half a scale)."""
    amax = jnp.max(jnp.abs(x.astype(jnp.float32)), axis=-1)
    scale = jnp.where(amax > 0, amax / 127.0, 1.0)
    ints = jnp.clip(jnp.round(x.astype(jnp.float32) / scale[..., None]), -127, 127).astype(jnp.int8)
    return ints, scale


def quantized_cache(cache: dict[str, dict[str, jax.Array]]) -> dict[str, dict[str, jax.Array]]:
    """``cache`` (a sampler's new cache, Tunix's ``init_cache``: every position empty) with each layer's
    keys and values int8 and a float32 scale per position and head; each layer's old buffers dropped
    before the next layer's new ones exist (the dicts are changed in place), so the peak is the old cache
    and one layer's new one."""
    for layer in cache.values():
        shape = layer["k"].shape
        for name in ("k", "v"):
            del layer[name]
            layer[name] = jnp.zeros(shape, jnp.int8)
            layer[f"{name}_scale"] = jnp.ones(shape[:3], jnp.float32)
    return cache


def _qwen3(attn: Any, x: jax.Array, segment_pos: jax.Array) -> tuple[jax.Array, ...]:
    from tunix.models.qwen3 import model as q3

    q = q3.apply_rope(attn.q_norm(attn.q_proj(x)), segment_pos, head_dim=attn.head_dim)
    k = q3.apply_rope(attn.k_norm(attn.k_proj(x)), segment_pos, head_dim=attn.head_dim)
    return q, k, attn.v_proj(x)


def _qwen2(attn: Any, x: jax.Array, sin: jax.Array, cos: jax.Array) -> tuple[jax.Array, ...]:
    from tunix.models.qwen2 import model as q2

    def proj(p: Any, bias: Any) -> jax.Array:
        y = p(x)
        b, t, n, h = y.shape
        return (y.reshape(b, t, n * h) + bias.astype(attn.config.dtype)).reshape(b, t, n, h)

    q = q2.apply_rotary_embedding(proj(attn.q_proj, attn.q_bias), sin, cos)
    k = q2.apply_rotary_embedding(proj(attn.k_proj, attn.k_bias), sin, cos)
    return q, k, proj(attn.v_proj, attn.v_bias)


def _llama3(attn: Any, x: jax.Array, segment_pos: jax.Array) -> tuple[jax.Array, ...]:
    from tunix.models.llama3 import model as l3

    q = l3.apply_rope(attn.q_proj(x), segment_pos, head_dim=attn.head_dim)
    k = l3.apply_rope(attn.k_proj(x), segment_pos, head_dim=attn.head_dim)
    return q, k, attn.v_proj(x)


# each family's projections of a decode step, from the arguments of its ``Attention.block``
_PROJECTIONS: dict[str, Callable[..., tuple[jax.Array, ...]]] = {
    "qwen3": lambda a, args: _qwen3(a, args["x"], args["segment_pos"]),
    "qwen2": lambda a, args: _qwen2(a, args["x"], args["sin"], args["cos"]),
    "llama3": lambda a, args: _llama3(a, args["x"], args["segment_pos"]),
}


@contextlib.contextmanager
def bounded(group: int = 1, prompt: int = 0) -> Iterator[None]:
    """Decode steps traced in this thread, inside this, use ``bounded_attention`` (``install``), every
    ``group`` sequences sharing their first ``prompt`` positions (``shared_prompts``)."""
    before = getattr(_ON, "on", False), getattr(_ON, "shared", (1, 0))
    _ON.on, _ON.shared = True, (group, prompt)
    try:
        yield
    finally:
        _ON.on, _ON.shared = before


def shared_prompts(tokens: np.ndarray) -> int:
    """How many consecutive sequences share each prompt: the largest ``G`` such that every aligned run of
    ``G`` rows of ``tokens`` (``[B, prompt]``, the padded prompts) is one prompt; 1 where none repeat.

    Why: GRPO asks the sampler for ``G`` completions of each prompt, and Tunix's learner repeats each
    prompt ``G`` times in a row, so the rows' prompt keys and values are ``G`` copies; ``bounded_attention``
    then reads them once a group. Checked on the call's own tokens, never assumed: any order works, an
    order without aligned repeats just shares nothing.
    """
    rows = tokens.shape[0]
    starts = [0, *(i for i in range(1, rows) if not np.array_equal(tokens[i], tokens[i - 1])), rows]
    return math.gcd(*np.diff(starts).tolist())


def install() -> None:
    """Wrap each family's ``Attention.block`` (once) so that a decode step (one token, with a cache)
    traced inside ``bounded`` runs ``decode_step``; every other call is Tunix's block."""
    for family in FAMILIES:
        cls = importlib.import_module(f"tunix.models.{family}.model").Attention
        if getattr(cls.block, "_rljob_bounded", False):
            continue
        cls.block = _wrapped(cls.block, _PROJECTIONS[family])


def _wrapped(
    block: Callable[..., Any], projections: Callable[..., tuple[jax.Array, ...]]
) -> Callable[..., Any]:
    """``block`` (a family's ``Attention.block``), running ``decode_step`` for a decode step inside
    ``bounded`` (segment ids, which qwen2's block also masks by, are never given to a decode step)."""
    signature = inspect.signature(block)

    @functools.wraps(block)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        call = bound.arguments
        cache = call["cache"]
        decoding = cache is not None and call["x"].shape[1] == 1 and call.get("segment_ids") is None
        quantized = cache is not None and "k_scale" in cache  # only this block reads such a cache
        if not (quantized or (decoding and getattr(_ON, "on", False))):
            return block(self, *args, **kwargs)
        q, k, v = projections(self, call)
        step = decode_step if decoding else prefill_step
        return step(self, q, k, v, cache, call["attn_mask"])

    run._rljob_bounded = True  # type: ignore[attr-defined]
    return run
