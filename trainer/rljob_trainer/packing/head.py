"""Per-token log-probs through the vocabulary head in chunks of tokens, without ``[N, V]`` logits.

Why: a real vocabulary makes the logits the largest tensor of the step. Qwen3-0.6B's head (151,936
words) over 16 rows of 512 tokens is 5 GB of float32 logits, more than the rest of the forward pass
together. GRPO needs only, per token, the log-prob of the next token (and the entropy, an aux metric):
``logit[target] - logsumexp(logits)`` and ``logsumexp - sum(softmax * logits)``. Computing them for
``chunk`` tokens at a time (``lax.map`` over chunks, each chunk under ``jax.checkpoint`` so the backward
pass recomputes its logits instead of storing them) keeps one ``[chunk, V]`` block alive. Exact: the
same dot products and the same log-softmax per token, only the order of tokens differs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

# The trainer's automatic choice (``auto_vocab_chunk``): chunk the head when the vocabulary is large
# enough for ``[tokens, V]`` logits to dominate the step's memory. 256 tokens of Qwen3-0.6B's 151,936
# words are a 156 MB float32 block; a 256-word demo vocabulary keeps the whole head (chunking would only
# add a loop).
CHUNK_TOKENS = 256
CHUNK_ABOVE_VOCAB = 32_768
CHUNK_FAMILIES = ("qwen3", "qwen2", "llama3")  # adapter.BLOCKED_FAMILIES: the forward stops at the norm
CHUNK_ATTENTION = ("blocked", "dense")


def auto_vocab_chunk(family: str, vocab_size: int, attention: str) -> int:
    """Tokens per head chunk the trainer uses: ``CHUNK_TOKENS`` for a vocabulary above
    ``CHUNK_ABOVE_VOCAB`` on a family/attention the chunked head supports, else 0 (the whole head)."""
    if family in CHUNK_FAMILIES and attention in CHUNK_ATTENTION and vocab_size > CHUNK_ABOVE_VOCAB:
        return CHUNK_TOKENS
    return 0


def tied_head(model: Any) -> bool:
    """Whether the output head is the input embedding (qwen: ``use_tied_embedding``, llama3: ``weight_tying``)."""
    cfg = model.config
    return bool(getattr(cfg, "use_tied_embedding", getattr(cfg, "weight_tying", False)))


def head_weight(model: Any) -> jax.Array:
    """The ``[V, D]`` matrix the model's output head multiplies hidden states by (tied or not)."""
    if tied_head(model):
        return model.embedder.input_embedding.value
    return model.lm_head.w.value.T  # Einsum "BTD,DV->BTV": w is [D, V]


def chunked_token_logps(
    hidden: jax.Array,
    targets: jax.Array,
    weight: jax.Array,
    *,
    temperature: float = 1.0,
    chunk: int,
    entropy: bool = False,
    dtype: Any = None,
) -> tuple[jax.Array, jax.Array | None]:
    """``log p(targets)`` and (optionally) the entropy for every row of ``hidden``.

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

    @jax.checkpoint
    def one(args: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        xc, tc = args
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

    logp, ent = jax.lax.map(one, (x, t))
    logp = logp.reshape(-1)[:n].reshape(shape)
    return logp, (ent.reshape(-1)[:n].reshape(shape) if entropy else None)
