"""Model adapter: logits of packed rows for each Tunix model family, with exact attention.

Tunix 0.1.7's non-flash attention (CPU/GPU) never reads ``segment_ids`` and builds no causal mask, so a
packed row handed to ``model(...)`` attends across sequences. The adapter picks, per backend:

* ``splash`` (TPU, qwen3 / qwen2): the model's own call with ``segment_ids`` and, for that call only,
  ``config.use_flash_attention`` on and ``config.flash_attention_block_size`` set to a block dividing the row
  (``splash_block``), in the tracing thread only (``splash.flash_attention``). Tunix's flash path runs Pallas
  splash attention with a causal mask and segment ids: exact, and it skips blocks where segments do not meet.
  Why only for the packed call: the same model object is the vanilla sampler's, whose prefill passes a padding
  mask the flash path ignores (left-padded prompts would attend to padding) and whose prompt length the block
  would have to divide. For the head at completion columns, ``packed_hidden(splash=True)`` runs each layer's
  own attention block the same way (flash on while it traces) and stops at the final norm.
* ``blocked`` (CPU/GPU, qwen3 / qwen2 / llama3): a forward pass that reuses the model's own modules
  (embedder, norms, projections, rope, MLP, head) layer by layer and swaps only the attention core for
  ``attention.blocked_attention`` (block-sparse, cost follows the segments).
* ``dense`` (any family, incl. gemma3): the model's own call with ``attention_mask`` set to the dense
  segment-causal mask. Exact but ``L**2`` per row; the fallback where no blocked forward exists.
* ``segments`` (MaxText models behind MaxText's ``TunixMaxTextAdapter``, family ``maxtext``): the
  model's own call with ``segment_ids``; the adapter hands them to MaxText as ``decoder_segment_ids``
  and MaxText's attention masks by segment and causality itself (``dot_product`` on CPU, splash on TPU).

The blocked forwards mirror Tunix 0.1.7's ``__call__``/``block`` code (no KV cache; our own per-layer
remat and, optionally, the layers in one scan: ``stack.decoder``) up to the
final norm (``packed_hidden``; the head is applied whole by ``packed_logits`` or in token chunks by
``head.chunked_token_logps``); the tests compare them against Tunix's own unpacked forward to 1e-5.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import nnx
from jax.interpreters import pxla

from rljob_trainer.packing import maxtext_head
from rljob_trainer.packing.attention import blocked_attention, dense_attention, segment_causal_mask
from rljob_trainer.packing.head import tied_head
from rljob_trainer.packing.splash import flash_attention
from rljob_trainer.packing.stack import decoder as _decoder

Attention = Literal["auto", "splash", "blocked", "dense", "segments"]
BLOCKED_FAMILIES = ("qwen3", "qwen2", "llama3")
DENSE_FAMILIES = ("qwen3", "qwen2", "llama3", "gemma3")
SPLASH_FAMILIES = ("qwen3", "qwen2")
SEGMENT_FAMILIES = ("maxtext",)


def family_of(model: Any) -> str:
    """Tunix family name of a model instance, from its module (``tunix.models.<family>.model``), or
    ``maxtext`` for a model behind MaxText's Tunix adapter (told by module name, never imported here)."""
    parts = type(model).__module__.split(".")
    if parts[0] == "maxtext":
        return "maxtext"
    if len(parts) >= 3 and parts[0] == "tunix" and parts[1] == "models":
        return parts[2]
    raise ValueError(f"not a Tunix model: {type(model).__module__}.{type(model).__name__}")


def resolve_attention(model: Any, attention: Attention = "auto") -> str:
    """The attention implementation ``attention`` means for this model (see module docstring)."""
    family = family_of(model)
    flash = bool(getattr(getattr(model, "config", None), "use_flash_attention", False))
    if attention == "auto":
        if family in SEGMENT_FAMILIES:
            return "segments"
        if flash and family in SPLASH_FAMILIES:
            return "splash"
        attention = "blocked" if family in BLOCKED_FAMILIES else "dense"
    supported = {
        "splash": SPLASH_FAMILIES,
        "blocked": BLOCKED_FAMILIES,
        "dense": DENSE_FAMILIES,
        "segments": SEGMENT_FAMILIES,
    }[attention]
    if family not in supported:
        raise ValueError(f"packed attention {attention!r} does not support model family {family!r}")
    if attention != "splash" and flash:
        # The flash path ignores attention_mask; only segment ids keep it exact.
        raise ValueError(f"model uses flash attention; packed attention must be 'splash', not {attention!r}")
    return attention


def packed_logits(
    model: Any,
    tokens: jax.Array,
    positions: jax.Array,
    segment_ids: jax.Array,
    pairs: tuple[jax.Array, ...] | None,
    *,
    attention: str,
    block: int,
    kv_segment_ids: jax.Array | None = None,
    stream: tuple[jax.Array, jax.Array] | None = None,
    window: int = 0,
) -> jax.Array:
    """Float32 logits ``[R, L, V]`` of packed rows; every token sees only its own sequence's past.

    ``kv_segment_ids``: key ids where pad tokens inside completions are 0 (see ``example._holes``).
    Splash takes one id array for queries and keys, so there the hole's own query gets id 0 too: real
    tokens never see it (exact), but the logits at the hole (predicting the token after it) attend
    other id-0 columns, as Tunix's own unpacked flash path does with its 0/1 segment ids.
    ``stream``: see ``packed_hidden`` (blocked only; the other paths run the model's own call on rows).
    ``window``: splash only, see ``flash_attention``.
    """
    kv = segment_ids if kv_segment_ids is None else kv_segment_ids
    if attention == "splash":
        with flash_attention(model, block, window):
            logits, _ = model(tokens, positions=positions, cache=None, attention_mask=None, segment_ids=kv)
    elif attention == "segments":
        # One id array for queries and keys, as for splash (see above).
        logits, _ = model(tokens, positions=positions, cache=None, attention_mask=None, segment_ids=kv)
    elif attention == "dense":
        kwargs: dict[str, Any] = {}
        if "segment_ids" in inspect.signature(model.__call__).parameters:
            kwargs["segment_ids"] = kv
        mask = segment_causal_mask(segment_ids, kv)
        logits, _ = model(tokens, positions=positions, cache=None, attention_mask=mask, **kwargs)
    elif attention == "blocked":
        if pairs is None:
            raise ValueError("blocked attention needs block pairs (PackedTrainExample built with it)")
        hidden = packed_hidden(
            model, tokens, positions, segment_ids, pairs, block=block, kv=kv, stream=stream
        )
        logits = _head(model, hidden)
    else:
        raise ValueError(f"unknown packed attention {attention!r}")
    return jnp.astype(logits, jnp.float32)


def packed_hidden(
    model: Any,
    tokens: jax.Array,
    positions: jax.Array,
    segment_ids: jax.Array,
    pairs: tuple[jax.Array, ...] | None,
    *,
    block: int,
    kv: jax.Array | None = None,
    splash: bool = False,
    stream: tuple[jax.Array, jax.Array] | None = None,
    split_last: bool = False,
    window: int = 0,
) -> jax.Array:
    """Final-norm hidden states ``[R, L, D]`` (the head's input) of the blocked forward (qwen3/qwen2/llama3).

    ``pairs`` None: dense segment-causal attention over the full ``[L, L]`` (what Tunix's own non-flash
    attention computes), for comparing kernels with the same head. ``splash``: each layer's own
    attention block on Tunix's splash path (flash on, ``block``; ``kv`` as ids for queries and keys, as
    ``packed_logits`` passes them), so TPU runs stop at the final norm too. A MaxText model: its own
    decoder on the ``segments`` path (``maxtext_head.final_hidden``; ``kv`` as in splash).
    ``stream`` (``rows.token_stream``'s ``(index, of_slot)``, blocked/dense only): the embedding, norms,
    projections and MLP run on the real tokens alone; only the attention core sees rows (``_on_stream``).
    ``split_last`` (blocked/dense only): stop at the last layer's attention residual; ``last_layer_tail``
    applies its MLP and the final norm, at the columns whose states are used only. ``window``: splash
    only, see ``flash_attention``.
    """
    family = family_of(model)
    if split_last and (splash or family not in BLOCKED_FAMILIES):
        raise ValueError(f"split_last needs the blocked/dense forward of {BLOCKED_FAMILIES}")
    if family in SEGMENT_FAMILIES:
        return maxtext_head.final_hidden(model, tokens, positions, segment_ids if kv is None else kv)
    if splash:
        if family not in _SPLASH:
            raise ValueError(f"no splash hidden-state forward for model family {family!r}")
        with flash_attention(model, block, window):
            return _SPLASH[family](model, tokens, positions, segment_ids if kv is None else kv)
    if family not in BLOCKED_FAMILIES:
        raise ValueError(f"no hidden-state forward for model family {family!r}")

    def attend(q: jax.Array, k: jax.Array, v: jax.Array, scale: float) -> jax.Array:
        if pairs is None:
            return dense_attention(q, k, v, segment_ids, scale=scale, kv_segment_ids=kv)
        return blocked_attention(q, k, v, segment_ids, pairs, block=block, scale=scale, kv_segment_ids=kv)

    forward = functools.partial(_BLOCKED[family], split_last=split_last)
    if stream is None:
        return forward(model, tokens, positions, attend)
    return _on_stream(forward, model, tokens, positions, attend, *stream)


def last_layer_tail(model: Any) -> Callable[[jax.Array], jax.Array]:
    """What ``packed_hidden(split_last=True)`` leaves out, on ``[..., D]`` states: the last layer's MLP
    residual and the final norm. Both are per-token and feed only the head, so where the head runs at
    completion columns only they can too (the MLP: 60% of a layer's FLOPs at Qwen3-0.6B width). Split
    out here, merged inside: the function runs in a loop's trace (``head_loop.counted_map``).

    The gathered states are ``[N, D]``, but Tunix's MLP constrains its activations to the model's
    ``[batch, tokens, features]`` sharding (``act_btf``, e.g. ``P('fsdp', None, 'tp')``), which a rank-2
    value fails on a TPU (CPU skips the constraint). So the tail runs on ``[g, N / g, D]``: ``g`` the
    widest divisor of ``N`` the batch axes of that sharding allow (``token_batches``), so the tokens
    spread over the data-parallel devices as Tunix's own batches do.
    """
    graph, state = nnx.split((model.layers[-1], model.final_norm))
    batch_axes = _batch_axes(model)

    def tail(h: jax.Array) -> jax.Array:
        layer, norm = nnx.merge(graph, state)
        x = h.reshape(token_batches(h.shape[0], batch_axes), -1, h.shape[-1])
        return norm(x + layer.mlp(layer.post_attention_layernorm(x))).reshape(h.shape)

    return tail


def _batch_axes(model: Any) -> tuple[str, ...]:
    """Mesh axes the model's activation sharding puts the batch on (``act_btd[0]``; none without one)."""
    shd = getattr(getattr(model, "config", None), "shd_config", None)
    first = shd.act_btd[0] if shd is not None and shd.act_btd else None
    if first is None:
        return ()
    return (first,) if isinstance(first, str) else tuple(a for a in first if a)


def token_batches(n: int, batch_axes: tuple[str, ...]) -> int:
    """How many batch rows ``n`` gathered tokens become: the largest divisor of ``n`` that divides the
    width of ``batch_axes`` on the mesh Tunix's ``shard`` reads (1 without a mesh), so the batch dim
    shards evenly."""
    mesh = pxla.thread_resources.env.physical_mesh
    if mesh.empty:
        return 1
    width = math.prod(mesh.shape[a] for a in batch_axes if a in mesh.shape)
    return math.gcd(n, width)


def _on_stream(
    forward: Callable[[Any, jax.Array, jax.Array, Attend], jax.Array],
    model: Any,
    tokens: jax.Array,
    positions: jax.Array,
    attend: Attend,
    index: jax.Array,
    of_slot: jax.Array,
) -> jax.Array:
    """``forward`` over the token stream ``[1, S]`` instead of the rows ``[R, L]``; returns ``[R, L, D]``.

    Every per-token operation (embedding, norms, projections, rope at each token's own position, MLP)
    sees the ``S`` stream tokens only; the attention core gets its queries, keys and values moved
    into rows (padding slots zero: segment id 0, never attended) and its output moved back to the
    stream. Gathers both ways (``_move``), so each value lands exactly where the row path computes it.
    """
    R, L = tokens.shape

    def to_stream(a: jax.Array) -> jax.Array:
        flat = a.reshape(R * L, *a.shape[2:])
        if not jnp.issubdtype(a.dtype, jnp.floating):  # token ids, positions: no gradient
            return jnp.concatenate([flat, jnp.zeros((1, *flat.shape[1:]), a.dtype)])[index][None]
        return _move(flat, index, of_slot)[None]

    def to_rows(a: jax.Array) -> jax.Array:
        return _move(a[0], of_slot, index).reshape(R, L, *a.shape[2:])

    def attend_rows(q: jax.Array, k: jax.Array, v: jax.Array, scale: float) -> jax.Array:
        return to_stream(attend(to_rows(q), to_rows(k), to_rows(v), scale))

    return to_rows(forward(model, to_stream(tokens), to_stream(positions), attend_rows))


def _head(model: Any, x: jax.Array) -> jax.Array:
    """The model's output head (tied embedding or ``lm_head``), as its own ``__call__`` applies it."""
    return model.embedder.decode(x) if tied_head(model) else model.lm_head(x)


Attend = Callable[[jax.Array, jax.Array, jax.Array, float], jax.Array]


def _qwen3(
    model: Any, tokens: jax.Array, positions: jax.Array, attend: Attend, split_last: bool = False
) -> jax.Array:
    from tunix.models.qwen3 import model as q3

    def attn_fn(a: Any, x: jax.Array) -> jax.Array:
        q = q3.apply_rope(a.q_norm(a.q_proj(x)), positions, head_dim=a.head_dim)
        k = q3.apply_rope(a.k_norm(a.k_proj(x)), positions, head_dim=a.head_dim)
        return a.o_proj(attend(q, k, a.v_proj(x), a.scale))

    return _decoder(model, model.embedder.encode(tokens), attn_fn, split_last)


def _qwen2(
    model: Any, tokens: jax.Array, positions: jax.Array, attend: Attend, split_last: bool = False
) -> jax.Array:
    from tunix.models.qwen2 import model as q2

    cfg = model.config
    x = model.embedder.encode(tokens)
    sin, cos = q2._generate_pos_embeddings(positions, cfg.head_dim, cfg.rope_theta)
    sin, cos = sin.astype(x.dtype), cos.astype(x.dtype)

    def attn_fn(a: Any, x: jax.Array) -> jax.Array:
        def proj(p: Any, bias: Any) -> jax.Array:
            y = p(x)
            b, t, n, h = y.shape
            return (y.reshape(b, t, n * h) + bias.astype(cfg.dtype)).reshape(b, t, n, h)

        q = q2.apply_rotary_embedding(proj(a.q_proj, a.q_bias), sin, cos)
        k = q2.apply_rotary_embedding(proj(a.k_proj, a.k_bias), sin, cos)
        return a.o_proj(attend(q, k, proj(a.v_proj, a.v_bias), a.scale))

    return _decoder(model, x, attn_fn, split_last)


def _llama3(
    model: Any, tokens: jax.Array, positions: jax.Array, attend: Attend, split_last: bool = False
) -> jax.Array:
    from tunix.models.llama3 import model as l3

    def attn_fn(a: Any, x: jax.Array) -> jax.Array:
        q = l3.apply_rope(a.q_proj(x), positions, head_dim=a.head_dim)
        k = l3.apply_rope(a.k_proj(x), positions, head_dim=a.head_dim)
        return a.o_proj(attend(q, k, a.v_proj(x), a.scale))

    return _decoder(model, model.embedder.encode(tokens), attn_fn, split_last)


def _qwen3_splash(model: Any, tokens: jax.Array, positions: jax.Array, ids: jax.Array) -> jax.Array:
    """Each layer's own attention block (Tunix's splash path with segment ids while flash is on)."""

    def attn_fn(a: Any, x: jax.Array) -> jax.Array:
        return a.block(x, positions, None, None, segment_ids=ids)[1]

    return _decoder(model, model.embedder.encode(tokens), attn_fn)


def _qwen2_splash(model: Any, tokens: jax.Array, positions: jax.Array, ids: jax.Array) -> jax.Array:
    """As ``_qwen3_splash``; qwen2's block takes the rotary tables instead of positions."""
    from tunix.models.qwen2 import model as q2

    cfg = model.config
    x = model.embedder.encode(tokens)
    sin, cos = q2._generate_pos_embeddings(positions, cfg.head_dim, cfg.rope_theta)
    sin, cos = sin.astype(x.dtype), cos.astype(x.dtype)

    def attn_fn(a: Any, x: jax.Array) -> jax.Array:
        return a.block(x, None, None, sin, cos, segment_ids=ids)[1]

    return _decoder(model, x, attn_fn)


@jax.custom_vjp
def _move(x: jax.Array, take: jax.Array, back: jax.Array) -> jax.Array:
    """``x`` with a zero row appended, gathered at ``take``; ``back`` is the inverse map.

    Why a custom VJP: autodiff transposes a gather into a scatter-add, a serial loop on XLA's CPU
    backend, four per layer and pass. The stream maps are a bijection between real slots and stream
    positions (``rows.token_stream``; padding reads the appended zero row and is read by nobody), so the
    transpose is the gather the other way: ``g`` with a zero row, gathered at ``back``.
    """
    return jnp.concatenate([x, jnp.zeros((1, *x.shape[1:]), x.dtype)])[take]


def _move_fwd(
    x: jax.Array, take: jax.Array, back: jax.Array
) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return _move(x, take, back), (take, back)


def _move_bwd(res: tuple[jax.Array, jax.Array], g: jax.Array) -> tuple[jax.Array, None, None]:
    take, back = res
    return _move(g, back, take), None, None


_move.defvjp(_move_fwd, _move_bwd)


_SPLASH: dict[str, Callable[[Any, jax.Array, jax.Array, jax.Array], jax.Array]] = {
    "qwen3": _qwen3_splash,
    "qwen2": _qwen2_splash,
}

_BLOCKED: dict[str, Callable[[Any, jax.Array, jax.Array, Attend], jax.Array]] = {
    "qwen3": _qwen3,
    "qwen2": _qwen2,
    "llama3": _llama3,
}
