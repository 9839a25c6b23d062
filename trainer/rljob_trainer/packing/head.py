"""Per-token log-probs through the vocabulary head in chunks of tokens, without ``[N, V]`` logits.

Why: a real vocabulary makes the logits the largest tensor of the step. Qwen3-0.6B's head (151,936
words) over 16 rows of 512 tokens is 5 GB of float32 logits, more than the rest of the forward pass
together. GRPO needs only, per token, the log-prob of the next token (and the entropy, an aux metric):
``logit[target] - logsumexp(logits)`` and ``logsumexp - sum(softmax * logits)``. Computing them for
``chunk`` tokens at a time (``lax.map`` over chunks, each chunk under ``jax.checkpoint`` so the backward
pass recomputes its logits instead of storing them) keeps one ``[chunk, V]`` block alive. Exact: the
same dot products and the same log-softmax per token, only the order of tokens differs.

Why the head runs at completion columns only (``completion_rows``): GRPO's loss, the reference pass and
the old-policy pass use log-probs of completion tokens only, yet a row's prompt columns (up to 384 of
1,024 in the v5e example) and its padding would go through the head and its backward too. The final
hidden states are gathered at the columns that predict completion tokens (one before each token),
packed to the front of a ``[K, D]`` block, and only those reach the head; chunks past the real count
are skipped at run time (``head_loop``), so the head's cost follows the real completion tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rljob_trainer.packing import maxtext_head
from rljob_trainer.packing.head_loop import counted_map, counted_token_logps

# The trainer's automatic choice (``auto_vocab_chunk``): chunk the head when the vocabulary is large
# enough for ``[tokens, V]`` logits to dominate the step's memory. 256 tokens of Qwen3-0.6B's 151,936
# words are a 156 MB float32 block; a 256-word demo vocabulary keeps the whole head (chunking would only
# add a loop).
CHUNK_TOKENS = 256
# On the TPU (splash attention) a chunk of 1,024 tokens: each chunk adds the head's float32 [V, D] weight
# gradient once (10.5% of the v5e example's train step at 256, in 159 chunks), and four times fewer
# chunks cut the train phase by 6% (6.63 -> 6.20 s, MFU 31.3 -> 33.4%; one v5e chip, 2026-12-06, docs/tpu.md)
# for a 622 MB float32 block, inside the half of the free HBM the token budget leaves to such temporaries.
SPLASH_CHUNK_TOKENS = 1024
CHUNK_ABOVE_VOCAB = 32_768
CHUNK_FAMILIES = ("qwen3", "qwen2", "llama3")  # adapter.BLOCKED_FAMILIES: the forward stops at the norm
# Splash (the TPU path) too: its forward also stops at the final norm (``adapter.packed_hidden``), and the
# head then runs at completion columns, where a chunk works on the gathered states whatever the attention.
# Without it a 4 x 8 step of 768 tokens asked 19.7 GB of float32 logits on one v5e chip (issue 40).
CHUNK_ATTENTION = ("blocked", "dense", "splash")


def auto_vocab_chunk(family: str, vocab_size: int, attention: str) -> int:
    """Tokens per head chunk the trainer uses: ``CHUNK_TOKENS`` (``SPLASH_CHUNK_TOKENS`` with splash, the
    TPU's attention) for a vocabulary above ``CHUNK_ABOVE_VOCAB`` on a family/attention the chunked head
    supports, else 0 (the whole head)."""
    if family in CHUNK_FAMILIES and attention in CHUNK_ATTENTION and vocab_size > CHUNK_ABOVE_VOCAB:
        return SPLASH_CHUNK_TOKENS if attention == "splash" else CHUNK_TOKENS
    return 0


def apply_head(model: Any, x: jax.Array) -> jax.Array:
    """The model's output head (tied embedding or ``lm_head``) on ``[..., D]``, as its ``__call__`` does."""
    if maxtext_head.is_maxtext(model):
        return maxtext_head.apply_head(model, x)
    return model.embedder.decode(x) if tied_head(model) else model.lm_head(x)


def tied_head(model: Any) -> bool:
    """Whether the output head is the input embedding (qwen: ``use_tied_embedding``, llama3: ``weight_tying``)."""
    cfg = model.config
    return bool(getattr(cfg, "use_tied_embedding", getattr(cfg, "weight_tying", False)))


def head_weight(model: Any) -> jax.Array:
    """The ``[V, D]`` matrix the model's output head multiplies hidden states by (tied or not)."""
    if maxtext_head.is_maxtext(model):
        return maxtext_head.head_weight(model)
    if tied_head(model):
        return model.embedder.input_embedding.value
    return model.lm_head.w.value.T  # Einsum "BTD,DV->BTV": w is [D, V]


def head_dtype(model: Any) -> Any:
    """The dtype the model's head multiplies in (its compute dtype; MaxText: ``maxtext_head.head_dtype``)."""
    if maxtext_head.is_maxtext(model):
        return maxtext_head.head_dtype(model)
    return getattr(model.config, "dtype", None)


def chunked_token_logps(
    hidden: jax.Array,
    targets: jax.Array,
    weight: jax.Array,
    *,
    temperature: float = 1.0,
    chunk: int,
    entropy: bool = False,
    dtype: Any = None,
    count: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array | None]:
    """``log p(targets)`` and (optionally) the entropy for every row of ``hidden``.

    ``count``: only the first ``count`` flattened rows are real (``completion_rows``); chunks that
    start at or after it are not computed (their outputs are 0).

    ``hidden``: ``[..., D]`` final-norm hidden states; ``targets``: ``[...]`` token ids; ``weight``:
    ``[V, D]`` (``head_weight``). ``dtype``: the model's compute dtype for the head matmul (as its own
    ``decode``/``lm_head``); log-softmax in float32. Returns float32 arrays shaped like ``targets``.
    """
    shape = targets.shape
    d = hidden.shape[-1]
    x = hidden.reshape(-1, d)
    t = targets.reshape(-1)
    n = t.shape[0]
    pad = (-n) % chunk
    x = jnp.pad(x, ((0, pad), (0, 0))).reshape(-1, chunk, d)
    t = jnp.pad(t, (0, pad)).reshape(-1, chunk)
    w = weight if dtype is None else weight.astype(dtype)

    def compute(xc: jax.Array, tc: jax.Array) -> tuple[jax.Array, jax.Array]:
        xc = xc if dtype is None else xc.astype(dtype)
        logits = jnp.dot(xc, w.T).astype(jnp.float32)
        if temperature != 0.0 and temperature != 1.0:
            logits = logits / temperature
        lse = jax.nn.logsumexp(logits, axis=-1)
        logp = jnp.take_along_axis(logits, tc[:, None], axis=-1)[:, 0] - lse
        if not entropy:
            return logp, jnp.zeros_like(logp)
        ent = lse - jnp.sum(jax.nn.softmax(logits, axis=-1) * logits, axis=-1)
        return logp, ent

    if count is not None:  # head_loop: skips chunks past count without a second [V, D] buffer
        logp, ent = counted_token_logps(x, w, t, jnp.asarray(count, jnp.int32), temperature, entropy, dtype)
    else:
        logp, ent = jax.lax.map(jax.checkpoint(lambda args: compute(*args)), (x, t))
    logp = logp.reshape(-1)[:n].reshape(shape)
    return logp, (ent.reshape(-1)[:n].reshape(shape) if entropy else None)


def completion_rows(completion_index: jax.Array, n_tokens: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Where the head's inputs come from when it runs at completion columns only.

    ``completion_index``: ``[B, Tc]`` flat index (into ``n_tokens = R * L``) of each completion token, 0
    for padding (a real completion token is never at flat index 0: its sequence starts with a prompt
    token). Returns ``src`` ``[K]`` (flat indices of the real completion tokens, front-packed in
    ``[B, Tc]`` order, then 0), ``slot`` ``[B, Tc]`` (each token's place in ``src``, -1 for padding) and
    ``count`` (real tokens). ``K = min(B * Tc, n_tokens)``: static, bounded by the row slots, so no new
    compiled shape. The token at ``src[k]`` is predicted by the hidden state at ``src[k] - 1``.
    """
    idx = completion_index.reshape(-1)
    valid = idx > 0
    k = min(idx.shape[0], n_tokens)
    slot = jnp.where(valid, jnp.cumsum(valid) - 1, -1)
    src = jnp.zeros(k, idx.dtype).at[jnp.where(valid, slot, k)].set(idx, mode="drop")
    return src, slot.reshape(completion_index.shape), valid.sum(dtype=jnp.int32)


def completion_head_logps(
    model: Any,
    hidden: jax.Array,
    tokens: jax.Array,
    completion_index: jax.Array,
    *,
    temperature: float,
    chunk: int = 0,
    entropy: bool = False,
    chunked: Any = None,
    tail: Callable[[jax.Array], jax.Array] | None = None,
) -> tuple[jax.Array, jax.Array | None]:
    """``[B, Tc]`` log-probs (and entropies) of the completion tokens, the head applied at their
    predicting columns only (``completion_rows``); 0 at padding, as the whole-row path gives.

    ``hidden``: ``[R, L, D]`` final-norm hidden states of the rows ``tokens`` ``[R, L]``, or, with
    ``tail`` (``adapter.last_layer_tail``), the states before it: the tail then runs on the gathered
    states only, in chunks of ``chunk`` up to the real count (``head_loop.counted_map``).
    ``chunk`` > 0: ``chunked_token_logps`` over the gathered states (``chunked``: that function,
    injectable for tests); 0: the model's own head on all of them at once.
    """
    d = hidden.shape[-1]
    src, slot, count = completion_rows(completion_index, tokens.size)
    x = hidden.reshape(-1, d)[jnp.maximum(src - 1, 0)]  # column t - 1 predicts token t
    if tail is not None:
        x = counted_map(tail, x, count, chunk or x.shape[0])  # whole head: one chunk of all rows
    targets = tokens.reshape(-1)[src]
    if chunk:
        logp, ent = (chunked or chunked_token_logps)(
            x,
            targets,
            head_weight(model),
            temperature=temperature,
            chunk=chunk,
            entropy=entropy,
            dtype=head_dtype(model),
            count=count,
        )
    else:
        logits = apply_head(model, x[None])[0].astype(jnp.float32)
        if temperature != 0.0 and temperature != 1.0:
            logits = logits / temperature
        logp_all = jax.nn.log_softmax(logits, axis=-1)
        logp = jnp.take_along_axis(logp_all, targets[:, None], axis=-1)[:, 0]
        ent = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1) if entropy else None

    def back(v: jax.Array) -> jax.Array:
        return jnp.where(slot >= 0, v[jnp.maximum(slot, 0)], 0.0)

    return back(logp), (back(ent) if entropy else None)
