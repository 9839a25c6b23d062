"""The JAX sampler's decode loop (Tunix's ``Sampler``, ``rollout.engine: vanilla``) as rljob compiles it.

Tunix decodes every sequence of a sampler call in lockstep: at decode step ``t`` (a cache position) only
the positions before ``t`` can hold keys and values, yet each step's attention reads the whole cache,
``prompt + completion`` positions, and masks the rest. At 32 sequences x 1,024 positions the cache of
Qwen3-0.6B is 3.76 GB in bf16, three times the weights every step also reads, so the cache decides how
fast decoding can be (issue 41).

* **In segments** (``segmented_decode``): the same loop, run in ``SEGMENTS`` pieces; piece ``j`` attends
  the cache's first ``ends[j]`` positions only (``segment_ends``: equal pieces from the prompt to the end).
  Each piece works on a copy of that prefix, written back into the whole cache when it ends; the last
  piece works on the whole cache itself. The mask over the positions a piece keeps is Tunix's own, and
  Tunix draws each token with the seed folded with its position, so the tokens are the same as Tunix's
  loop gives, up to the order of the attention's sums. With 4 pieces from a 256-token prompt to 1,024
  positions, a decode step reads 736 positions on average instead of 1,024 (-28% of the cache's
  bytes); the price is one copy of a prefix per piece and, while a piece runs, that copy beside the
  whole cache (81% more at the peak in that example, ``peak_cache_factor``). Off by default (``SEGMENTS``).
* **Without whole-cache copies** (``DECODE_COMPILER_OPTIONS``, TPU only): see below.
* **The cache laid out as the attention reads it** (``KV_LAYOUT``, ``laid_out``): Tunix's cache is
  ``[B, S, K, H]`` in the default (row-major) layout, but its attention contracts over ``H`` per
  ``(B, K)``, so XLA keeps the decode loop's cache head-major and copied every layer's cache into that
  layout when the loop began and back when it ended: a second KV cache of temporaries (3.24 GiB beside
  3.5 at 32 sequences x 1,024 positions of Qwen3-0.6B, compiled for v5e; on the chip, 8 prompts a call
  failed to load for it). The prefill and the decode now take and return the cache head-major (the
  prompt's cache is laid out once, before the prefill), so the donated cache is updated in place:
  temporaries 0.29 GiB, no whole-cache copy (``bench/tpu_aot.py decode``). Only the physical order
  changes; every number is the same. One device only (``sole_device``): on a mesh the cache keeps
  Tunix's layout.
* **Attending the filled positions only** (``BOUNDED``, ``decode_attention``; qwen3, qwen2, llama3): each
  decode step's attention reads the shortest prefix of the cache, in whole blocks, that holds every
  filled position instead of an einsum over the whole cache, and each prompt's positions once for the
  call's sequences that share it (GRPO's generations; ``by_shared_prompts``); compiled for v5e, the
  slices and prompts are read in place (``bench/tpu_aot.py decode --arm bounded|shared``). On the v5e
  chip: decode 7.2 ms a step of 64 sequences at the v5e example, rollout 16.9 -> 10.3 s a step
  (docs/tpu.md, 2026-12-07).
* **Timed** (``timed``): each prefill and decode call waited on and reported with its loop iterations,
  so every step says its decode time per iteration (``rljob_trainer_sampler_seconds_total``,
  ``rljob_trainer_decode_steps_total``; ``bench/tpu.py``'s ``decode_ms_per_iteration``) without a profile.

``install`` puts them on a cluster's sampler (``tunix_bridge.build``), on every backend (the options only
on a TPU; the pieces where ``SEGMENTS`` > 1), so CPU runs and tests decode as the chip does.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.layout import Format, Layout
from tunix.generate import sampler as sampler_lib

from rljob_trainer import decode_attention

# Pieces of the decode loop (see the module docstring); 1 is Tunix's loop over the whole cache. Not on by
# default: compiled for v5e (bench/tpu_aot.py, 32 sequences x 1,024 positions) four pieces read 28% less
# of the cache a step but need 2.36 GB more HBM at their peak, which halves the sampler call wherever its
# cache fills HBM (the v5e example's batch) and then costs more weight reads than it saves. Where the cache
# leaves room (2 x 8 at 768 positions) the chip has yet to say whether it pays (``bench/tpu.py
# --decode-segments 4``).
SEGMENTS = 1

# The decode step's attention over the filled cache positions only (``decode_attention``; qwen3, qwen2,
# llama3). On by default since 2026-12-07: on the v5e chip it cut the v5e example's rollout from 16.9 to
# 10.3 s a step (docs/tpu.md; ``bench/tpu.py --unbounded-decode`` is the A/B arm without it).
BOUNDED = True

# The sampler's KV cache in int8 with a float32 scale per position and head (``decode_attention.quantize``;
# only with ``BOUNDED``, whose attention is the only one that reads it): a decode step reads half the
# cache's bytes. Off by default: the keys and values a decode step attends are rounded (each to within half
# its vector's scale, 1/254 of its largest magnitude), so the sampled tokens are not Tunix's
# (``tests/trainer/test_decode_attention.py`` bounds the difference); ``bench/tpu.py --int8-kv-cache``.
INT8_CACHE = False

# XLA TPU's memory space assignment otherwise moves each layer's key (or value) cache, 64 MiB at 32
# sequences x 1,024 positions, into the chip's fast on-core memory for the attention that reads it, and
# after the one-token dynamic_update_slice copies all of it back: 28 copies of the cache per decode step
# of Qwen3-0.6B (Tunix's decode compiled for v5e; copy-done was 28% of a decode step in the chip's
# profile, docs/tpu.md). A use touching less of a buffer than this ratio of its size (the update
# writes 1/1,024 of it) no longer earns that placement: no such copy is left (bench/tpu_aot.py).
DECODE_COMPILER_OPTIONS: dict[str, Any] = {"xla_tpu_msa_inefficient_use_to_copy_ratio": 1.0}

# The sampler's key and value caches, logically ``[B, S, K, H]`` (Tunix's), stored ``[B, K, S, H]``: the
# order its attention reads them in (module docstring). None: the default layout, as Tunix leaves it.
KV_LAYOUT: Layout | None = Layout(major_to_minor=(0, 2, 1, 3))


def _is_kv(path: tuple[Any, ...], leaf: Any) -> bool:
    """A layer's key or value cache in a sampling state (``state.cache[layer]['k' | 'v']``, rank 4)."""
    keys = [getattr(k, "name", getattr(k, "key", None)) for k in path]
    return "cache" in keys and keys[-1] in ("k", "v") and getattr(leaf, "ndim", 0) == 4


def to_kv_layout(state: Any, where: Format) -> Any:
    """``state`` with every key and value cache in ``where`` (``KV_LAYOUT`` on the sampler's device; one
    layer's buffer at a time: each old one is donated), unchanged where they already are."""

    def lay(path: tuple[Any, ...], leaf: Any) -> Any:
        if not _is_kv(path, leaf):
            return leaf
        order = leaf.format.layout.major_to_minor  # (a TPU's layout also names its tiling)
        if order == where.layout.major_to_minor and leaf.sharding == where.sharding:
            return leaf
        return jax.device_put(leaf, where, donate=True)

    return jax.tree_util.tree_map_with_path(lay, state)


def sole_device(params: Any) -> jax.Device | None:
    """The one device holding every array of ``params`` (the sampler's weights), else None.

    Why only one: the layout is named together with the cache's sharding, and on a mesh of several
    devices that sharding is XLA's choice (propagated from the model's constraints), known only after
    compiling; such a rollout keeps Tunix's layout (the 4-device CPU mesh of
    ``tests/trainer/test_tpu_shardings.py``). One device is the single-chip case measured on the TPU.
    """
    devices = {d for leaf in jax.tree.leaves(params) if isinstance(leaf, jax.Array) for d in leaf.devices()}
    return devices.pop() if len(devices) == 1 else None


def laid_out(program: Callable[..., Any], device: jax.Device, **jit_kwargs: Any) -> Callable[..., Any]:
    """``program`` (the sampler's prefill or decode: ``(params, state, ...) -> state``) jitted to take and
    return the state's caches in ``KV_LAYOUT`` on ``device``, the state donated; one jit per state
    structure (the output's formats are named per leaf)."""
    assert KV_LAYOUT is not None
    where = Format(KV_LAYOUT, jax.sharding.SingleDeviceSharding(device))
    jits: dict[Any, Callable[..., Any]] = {}

    def run(params: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
        state = to_kv_layout(state, where)
        leaves, tree = jax.tree_util.tree_flatten_with_path(state)
        if tree not in jits:
            out = jax.tree_util.tree_unflatten(
                tree, [where if _is_kv(p, leaf) else None for p, leaf in leaves]
            )
            jits[tree] = jax.jit(program, donate_argnums=(1,), out_shardings=out, **jit_kwargs)
        return jits[tree](params, state, *args, **kwargs)

    return run


def segment_ends(prompt: int, cache_size: int, segments: int | None = None) -> list[int]:
    """The cache lengths the pieces attend, ascending, the last ``cache_size``: ``segments`` equal steps
    from ``prompt`` (the padded prompt; the first decoded token goes to that position) to ``cache_size``,
    fewer where they would be empty (``segments`` unset: ``SEGMENTS``, read at the call)."""
    segments = SEGMENTS if segments is None else segments
    span = cache_size - prompt
    ends = {prompt + -(-span * k // segments) for k in range(1, segments)}
    return [*sorted(e for e in ends if prompt < e < cache_size), cache_size]


def peak_cache_factor(prompt: int, cache_size: int, segments: int | None = None) -> float:
    """The decode loop's largest KV cache over Tunix's: the whole cache plus the largest piece's copy."""
    ends = segment_ends(prompt, cache_size, segments)
    return 1 + (ends[-2] / cache_size if len(ends) > 1 else 0)


class _Window:
    """Tunix's sampler seen with a cache of ``size`` positions (its ``_sample_step`` reads the cache size
    from ``cache_config`` to build the step's attention mask); everything else is the sampler's."""

    def __init__(self, sampler: sampler_lib.Sampler, size: int) -> None:
        self._sampler = sampler
        self.cache_config = dataclasses.replace(sampler.cache_config, cache_size=size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sampler, name)


def _prefix(cache: dict[str, Any], size: int) -> dict[str, Any]:
    """A copy of every layer's first ``size`` key and value positions (``end_index`` kept)."""
    return {
        name: {**layer, "k": layer["k"][:, :size], "v": layer["v"][:, :size]} for name, layer in cache.items()
    }


def _write_back(cache: dict[str, Any], prefix: dict[str, Any]) -> dict[str, Any]:
    """``cache`` with each layer's first positions replaced by ``prefix``'s (in place once donated)."""
    start = (0, 0, 0, 0)
    return {
        name: {
            **prefix[name],
            "k": jax.lax.dynamic_update_slice(layer["k"], prefix[name]["k"], start),
            "v": jax.lax.dynamic_update_slice(layer["v"], prefix[name]["v"], start),
        }
        for name, layer in cache.items()
    }


def segmented_decode(
    sampler: sampler_lib.Sampler, params: Any, state: Any, segments: int | None = None
) -> Any:
    """Tunix's ``Sampler._decode_fn`` (same arguments, same result) in pieces that attend only the cache
    positions they can have filled. Beam search (which reorders the cache) runs Tunix's own loop."""
    size = sampler.cache_config.cache_size
    segments = SEGMENTS if segments is None else segments
    if state.sampling_mode == "beam_search" or segments <= 1:
        return sampler._decode_fn(params, state)
    whole = state.cache
    prompt = int(state.num_input_tokens)  # a concrete array, static in the state's tree: a Python int
    for end in segment_ends(prompt, size, segments):
        window = _Window(sampler, end)
        state = dataclasses.replace(state, cache=whole if end == size else _prefix(whole, end))

        def keep_going(s: Any, end: int = end) -> jax.Array:
            return (s.decoding_step < end) & (s.decoding_step < s.total_sampling_steps) & jnp.any(~s.done)

        def step(s: Any, window: _Window = window) -> Any:
            return sampler_lib.Sampler._sample_step(window, params, s)

        state = jax.lax.while_loop(keep_going, step, state)
        if end < size:
            whole = _write_back(whole, state.cache)
    return state


# (part, seconds, decode iterations): ``progress.StepRecorder.add_sampler_call``
SamplerTiming = Callable[[str, float, int], None]


def timed(program: Callable[..., Any], part: str, timing: SamplerTiming) -> Callable[..., Any]:
    """``program`` (the sampler's jitted prefill or decode; ``(params, state, ...) -> state``), waited on
    until its result is ready and reported to ``timing`` with its decode iterations. The wait costs
    nothing that was not already waited for: the decode program needs the prefill's result, and Tunix
    copies the decoded tokens to the host right after the decode."""

    def run(params: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
        first = int(state.decoding_step)  # before the call: the state is donated to it
        start = time.perf_counter()
        out = jax.block_until_ready(program(params, state, *args, **kwargs))
        timing(part, time.perf_counter() - start, int(out.decoding_step) - first if part == "decode" else 0)
        return out

    return run


@dataclasses.dataclass(frozen=True)
class Installed:
    """What ``install`` compiled. ``kv_layout``: the caches are in ``KV_LAYOUT``, so the decode program
    needs no whole-cache copies beside its cache (``memory.rollout_prompts`` sizes the call by it)."""

    kv_layout: bool
    # the decode steps attend the filled cache positions only (``BOUNDED``, ``decode_attention``)
    bounded: bool = False
    # the cache is int8 (``INT8_CACHE``)
    int8_cache: bool = False


def install(
    cluster: Any, segments: int | None = None, timing: SamplerTiming | None = None
) -> Installed | None:
    """Compile the cluster's JAX sampler's decode loop as ``segmented_decode`` (and, on a TPU, with
    ``DECODE_COMPILER_OPTIONS``), donating the sampling state as Tunix does, its prefill and decode with
    the caches in ``KV_LAYOUT`` where its weights sit on one device (``sole_device``); with ``timing``,
    report each prefill and decode call's time (``timed``). None where the rollout has no JAX sampler
    (vLLM)."""
    sampler = getattr(getattr(cluster, "rollout", None), "_sampler", None)
    if not isinstance(sampler, sampler_lib.Sampler):  # vLLM's rollout has its own
        return None
    options = DECODE_COMPILER_OPTIONS if jax.default_backend() == "tpu" else {}
    decode = functools.partial(segmented_decode, sampler, segments=segments)
    device = sole_device(sampler._flattened_transformer_state)
    # one device, as the caches' layout: the swapped block leaves out Tunix's sharding constraints
    bounded = (
        BOUNDED
        and device is not None
        and type(sampler.transformer).__module__
        in {f"tunix.models.{family}.model" for family in decode_attention.FAMILIES}
    )
    kv_layout = KV_LAYOUT is not None and device is not None

    def compiled(decode: Callable[..., Any]) -> Callable[..., Any]:
        if not kv_layout:
            return jax.jit(decode, donate_argnums=(1,), compiler_options=options or None)
        return laid_out(decode, device, compiler_options=options or None)

    if kv_layout:
        sampler._compiled_prefill_fn = laid_out(sampler._prefill_fn, device, static_argnames=("echo",))
    if bounded:
        decode_attention.install()
        sampler._compiled_decode_fn = by_shared_prompts(lambda group: compiled(traced_bounded(decode, group)))
    else:
        sampler._compiled_decode_fn = compiled(decode)
    int8_cache = INT8_CACHE and bounded
    if int8_cache:
        sampler.init_sample_state = with_int8_cache(sampler.init_sample_state)
    if timing is not None:
        sampler._compiled_prefill_fn = timed(sampler._compiled_prefill_fn, "prefill", timing)
        sampler._compiled_decode_fn = timed(sampler._compiled_decode_fn, "decode", timing)
    return Installed(kv_layout=kv_layout, bounded=bounded, int8_cache=int8_cache)


def with_int8_cache(init: Callable[..., Any]) -> Callable[..., Any]:
    """``init`` (a sampler's ``init_sample_state``) whose state's new cache is int8 with scales
    (``decode_attention.quantized_cache``): the prefill and decode steps of the swapped attention block
    see the scales and write and read it so."""

    def run(*args: Any, **kwargs: Any) -> Any:
        state = init(*args, **kwargs)
        return dataclasses.replace(state, cache=decode_attention.quantized_cache(state.cache))

    return run


def traced_bounded(decode: Callable[..., Any], group: int = 1) -> Callable[..., Any]:
    """``decode`` (``(params, state) -> state``) traced with ``decode_attention.bounded`` on (jit traces it
    in the calling thread), every ``group`` sequences sharing the state's prompt positions."""

    @functools.wraps(decode)
    def run(params: Any, state: Any) -> Any:
        with decode_attention.bounded(group, int(state.num_input_tokens)):
            return decode(params, state)

    return run


def by_shared_prompts(program_for: Callable[[int], Callable[..., Any]]) -> Callable[..., Any]:
    """A decode program that runs ``program_for(G)`` (made once per ``G``), ``G`` the call's sequences
    sharing each prompt (``decode_attention.shared_prompts`` of its padded prompts, read on the host
    before the call: ``B x prompt`` integers)."""
    programs: dict[int, Callable[..., Any]] = {}

    def run(params: Any, state: Any) -> Any:
        prompts = np.asarray(state.token_buffer[:, : int(state.num_input_tokens)])
        group = decode_attention.shared_prompts(prompts)
        if group not in programs:
            programs[group] = program_for(group)
        return programs[group](params, state)

    return run
