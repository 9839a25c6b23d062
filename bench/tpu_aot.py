"""Compile the trainer's TPU programs for a v5e chip on a CPU machine, without the chip: what a maintainer
reruns to see a program's HBM temporaries and XLA's buffer placement before spending chip time.

JAX compiles ahead of time against a TPU topology description (``jax.experimental.topologies``) when
libtpu is importable; nothing runs, nothing needs the device. Install the chip's libtpu beside the venv
(not into it: with libtpu present every JAX process would probe for a TPU):

    uv venv /tmp/libtpu && uv pip install -p /tmp/libtpu/bin/python libtpu==0.0.42.1
    LIBTPU_SITE=/tmp/libtpu/lib/python3.11/site-packages .venv/bin/python bench/tpu_aot.py decode

``decode``: Tunix's vanilla sampler decode loop for Qwen3-0.6B (bf16, the trainer's compute dtype), as
Tunix jits it (arm ``tunix``), with ``decode.DECODE_COMPILER_OPTIONS`` but Tunix's cache layout
(``default-layout``), as the trainer does (``rljob``: those options and ``decode.KV_LAYOUT``) and so in
four pieces (``segments4``, ``decode.segmented_decode``); prints, per arm, the copies of a whole layer
cache (or piece) XLA inserts per decode step and once a call, and the program's temporaries.
``prefill``: the sampler's prefill, with the cache in Tunix's layout and in ``decode.KV_LAYOUT``.

``train``: one GRPO train step (loss, gradients, the trainer's optimizer update) of Qwen3-0.6B in bf16:
Tunix's own ``grpo_loss_fn`` on ``--sequences`` unpacked sequences (what its GRPOLearner runs per
micro-batch), or with ``--packed-rows R`` the packed learner's loss on R rows of ``--row`` tokens (splash,
vocabulary head in chunks of ``head.SPLASH_CHUNK_TOKENS``, ``--window``). Prints the temporaries XLA needs (also when they exceed
the chip: XLA refuses to compile then, and its message gives the figure) and whether they fit beside the
state, and the serialized executable's size (what the persistent cache holds and a warm start loads).
``--scan-layers``: the packed layers in one ``lax.scan`` (``stack.SCAN_LAYERS``; the trainer's default on a
TPU, which this CPU process is not: without the flag the layers are unrolled). The chip's figure for
Tunix at 16 sequences of 256 + 512 was 21.74 GB (2026-12-06); this gives 21.99 GB.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

ENV = {
    "JAX_PLATFORMS": "cpu",  # the host's own backend; the TPU one exists only as a compile target
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_ACCELERATOR_TYPE": "v5litepod-1",
    "TPU_WORKER_HOSTNAMES": "localhost",
}


def v5e_mesh() -> Any:
    """A one-chip v5e mesh with the trainer's axis names, from libtpu's topology description."""
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh

    topo = topologies.get_topology_desc(
        topology_name="v5e:1x1", platform="tpu", chips_per_host_bounds=(1, 1, 1)
    )
    return Mesh(np.array(topo.devices).reshape(1, 1), ("fsdp", "tp"))


def on_chip(mesh: Any, tree: Any) -> Any:
    """Every array of ``tree`` as an abstract value on the chip (what ``lower`` compiles for)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    here = NamedSharding(mesh, P())
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=here) if hasattr(x, "shape") else x, tree
    )


def abstract_sampler(config: Any, cache_size: int) -> Any:
    """Tunix's ``Sampler`` over an abstract model (shapes only), for lowering its decode loop."""
    import inspect

    import jax
    import jax.numpy as jnp
    from flax import nnx
    from tunix.generate import sampler as sampler_lib
    from tunix.models.qwen3 import model as qwen3

    model = nnx.eval_shape(lambda: qwen3.Qwen3(config, rngs=nnx.Rngs(0)))

    class Tokenizer:  # what init_sample_state and the decode loop ask of one
        def pad_id(self) -> int:
            return 0

        def eos_id(self) -> int:
            return 1

        def bos_id(self) -> None:
            return None

    s = sampler_lib.Sampler.__new__(sampler_lib.Sampler)  # __init__ would jit over concrete weights
    s.tokenizer = Tokenizer()
    s.cache_config = sampler_lib.CacheConfig(
        cache_size, config.num_layers, config.num_kv_heads, config.head_dim
    )
    s._transformer_graphdef = nnx.graphdef(model)
    s._transformer_state = nnx.variables(model)
    s._flattened_transformer_state = jax.tree.leaves(
        s._transformer_state, is_leaf=lambda x: isinstance(x, nnx.Variable)
    )
    s.eos_ids = jnp.array([1])
    s._supports_decode_only_last_token = (  # as __init__ sets it, for the prefill
        "decode_only_last_token" in inspect.signature(type(model).__call__).parameters
    )
    return s


def decode_program(
    config: Any,
    batch: int,
    prompt: int,
    cache_size: int,
    options: dict[str, Any],
    segments: int | None,
    kv_layout: bool = False,
    prefill: bool = False,
    group: int | None = None,
) -> dict:
    """Compile the decode loop for v5e (``decode.segmented_decode`` in ``segments`` pieces; 1 is Tunix's
    loop), or with ``prefill`` the sampler's prefill, its caches taken and returned in ``decode.KV_LAYOUT``
    where ``kv_layout`` (as ``decode.laid_out`` does), else in the default layout (Tunix's); the copies of
    a layer's whole cache (or of a piece's) per step and once a call, and the temporaries. With ``group``
    (``decode_attention``, ``group`` sequences sharing each prompt): the buffers of a block's (or of a
    group's prompt's) shape outside any fusion (one read in place, inside the matmul that reads it,
    makes none) and such values inside fusions."""
    import functools
    import re

    import jax
    import jax.numpy as jnp
    from flax import nnx
    from rljob_trainer import decode, decode_attention

    mesh = v5e_mesh()
    s = abstract_sampler(config, cache_size)
    ids = jax.ShapeDtypeStruct((batch, prompt), jnp.int32)
    state = jax.eval_shape(
        lambda i: s.init_sample_state(i, cache_size, False, None, 1.0, 1.0, None, jax.random.key(0), None),
        ids,
    )
    # a concrete array in the sampler (its static field): eval_shape left a tracer there
    state = dataclasses.replace(state, num_input_tokens=jnp.array(prompt, jnp.int32))
    params, state = on_chip(mesh, (nnx.state(s.transformer), state))
    out = None
    if kv_layout:  # what decode.laid_out gives the trainer's decode: the caches in and out in KV_LAYOUT
        from jax.experimental.layout import Format

        def lay(path: Any, x: Any) -> Any:
            kv = decode._is_kv(path, x)
            return (
                jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=Format(decode.KV_LAYOUT, x.sharding))
                if kv
                else x
            )

        state = jax.tree_util.tree_map_with_path(lay, state)
        out = jax.tree_util.tree_map_with_path(
            lambda path, x: Format(decode.KV_LAYOUT, x.sharding) if decode._is_kv(path, x) else None, state
        )
    with jax.set_mesh(mesh):
        if prefill:  # as the sampler calls it: no images, the prompt's tokens not echoed
            loop = functools.partial(s._prefill_fn, images=None, echo=False)
        else:
            loop = functools.partial(decode.segmented_decode, s, segments=segments)
            if group is not None:
                decode_attention.install()
                loop = decode.traced_bounded(loop, group)
        jitted = jax.jit(loop, donate_argnums=(1,), compiler_options=options, out_shardings=out)
        compiled, seconds = staged(jitted, params, state)
    # a layer's whole cache, or a piece of it (segments); the prefill's prompt-sized keys and values aside
    positions = str(cache_size) if prefill else "[0-9]+"
    cache = re.compile(rf"\[{batch},{positions},{config.num_kv_heads},{config.head_dim}\]")
    shared = prompt if group and group > 1 else 0
    block = decode_attention.block_size(cache_size - shared)
    kv = f"{config.num_kv_heads},{config.head_dim}"
    # a switch branch's own positions (whole blocks, short of the whole cache), or the group's prompt
    lengths = "|".join(str(n) for n in range(block, cache_size - shared + 1, block) if n != cache_size)
    block_shape = re.compile(rf"= \S+\[({batch},({lengths})|{batch // (group or 1)},{shared}),{kv}\]")
    # copies inside a loop's computations, and in the entry (once a call); bounded: block-shaped values
    per_step = once = blocks = blocks_fused = 0
    in_entry = in_fusion = False
    for ln in compiled.as_text().splitlines():
        if ln and not ln.startswith(" ") and ln.rstrip().endswith("{"):
            in_entry = ln.startswith("ENTRY")
            in_fusion = "fused" in ln.split("(")[0] or "fusion" in ln.split("(")[0]
        if group is not None and block_shape.search(ln):
            blocks_fused += in_fusion
            blocks += not in_fusion
        if not cache.search(ln):
            continue
        if "copy-start(" in ln:  # an async copy (XLA's memory placement): in the loop, once a step
            once, per_step = (once + 1, per_step) if in_entry else (once, per_step + 1)
        elif " copy(" in ln and in_entry:  # a layout change of the whole cache as the call begins or ends
            once += 1
    return {
        "options": options,
        "kv_layout": list(decode.KV_LAYOUT.major_to_minor) if kv_layout else None,
        "segments": None if prefill else decode.segment_ends(prompt, cache_size, segments),
        "whole_cache_copies_per_step": per_step,
        "whole_cache_copies_per_call": once,
        "group": group,
        "block_buffers": blocks if group is not None else None,
        "block_values_in_fusions": blocks_fused if group is not None else None,
        "temp_bytes": compiled.memory_analysis().temp_size_in_bytes,
        "seconds": seconds,
    }


def staged(jitted: Any, *args: Any) -> tuple[Any, dict[str, float]]:
    """Trace, lower and compile ``jitted`` for ``args``, timing each stage: a warm start with JAX's
    persistent cache still traces and lowers every program (the cache key is the lowered module) and
    skips only the compile, so the first two are what a cached restart pays here on the host."""
    import time

    seconds = {}
    t = time.perf_counter()
    traced = jitted.trace(*args)
    seconds["trace"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    lowered = traced.lower()
    seconds["lower"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    try:
        return lowered.compile(), seconds
    finally:
        seconds["compile"] = round(time.perf_counter() - t, 2)


def train_program(
    config: Any, sequences: int, prompt: int, total: int, packed_rows: int, row: int, window: int
) -> dict:
    """Compile one train step for v5e; its temporaries (from XLA's refusal when they do not fit)."""
    import re
    import types

    import jax
    import numpy as np
    from flax import nnx
    from jax.experimental import serialize_executable
    from rljob_trainer import tunix_bridge
    from rljob_trainer.packing.example import pack_train_example
    from rljob_trainer.packing.head import SPLASH_CHUNK_TOKENS
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
    from rljob_trainer.packing.splash import splash_block
    from rljob_trainer.packing.testing import grpo_config, random_train_example
    from tunix.models.qwen3 import model as qwen3
    from tunix.rl.algo_core import grpo_loss_fn

    mesh = v5e_mesh()
    if packed_rows:
        config = dataclasses.replace(
            config, use_flash_attention=True, flash_attention_block_size=splash_block(row)
        )
    spec = types.SimpleNamespace(grpo=types.SimpleNamespace(learningRate=1e-6))
    with jax.set_mesh(mesh):
        model, optimizer = nnx.eval_shape(
            lambda: (lambda m: (m, nnx.Optimizer(m, tunix_bridge.optimizer(spec), wrt=nnx.Param)))(
                qwen3.Qwen3(config, rngs=nnx.Rngs(0))
            )
        )
    graphdef, state = nnx.split((model, optimizer))
    rng = np.random.default_rng(0)
    completion = total - prompt
    example = random_train_example(
        list(rng.integers(prompt // 2, prompt + 1, sequences)),
        list(rng.integers(completion // 2, completion + 1, sequences)),
        max_prompt=prompt,
        max_completion=completion,
    )
    algo = grpo_config()  # beta 0.04, epsilon 0.2, temperature 0.9
    if packed_rows:
        example, plan = pack_train_example(example, row, pad_id=0)
        if plan.rows_used != packed_rows:
            raise SystemExit(f"{sequences} sequences packed into {plan.rows_used} rows, not {packed_rows}")
        packed_loss = make_packed_grpo_loss_fn(
            attention="splash", block=splash_block(row), vocab_chunk=SPLASH_CHUNK_TOKENS, window=window
        )

    def loss(m: Any, batch: Any) -> Any:
        if packed_rows:
            return packed_loss(m, batch, algo)
        return grpo_loss_fn(m, batch, algo, pad_id=0, eos_id=1)

    def step(state: Any, batch: Any) -> Any:
        m, o = nnx.merge(graphdef, state)
        (value, _), grads = nnx.value_and_grad(lambda mm: loss(mm, batch), has_aux=True)(m)
        o.update(m, grads)
        return nnx.state((m, o)), value

    placed = on_chip(mesh, (state, example))
    state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    try:
        with mesh:  # Tunix's splash path reads the mesh of the older context manager
            compiled, seconds = staged(jax.jit(step, donate_argnums=(0,)), *placed)
        temp = compiled.memory_analysis().temp_size_in_bytes
        # what the persistent cache stores and a warm start loads onto the chip
        executable = len(serialize_executable.serialize(compiled)[0])
    except jax.errors.JaxRuntimeError as exc:
        found = re.search(r"HLO temporaries \(([0-9.]+)G\)", str(exc))
        if found is None:
            raise
        temp, seconds, executable = int(float(found.group(1)) * 2**30), {}, None
    reference = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(nnx.state(model)))
    need = temp + state_bytes + reference  # + the reference model the learner keeps (beta > 0)
    return {
        "temp_bytes": temp,
        "state_bytes": state_bytes,
        "reference_bytes": reference,
        "fits_v5e": need <= V5E_HBM,
        "need_gib": round(need / 2**30, 2),
        "executable_bytes": executable,
        "seconds": seconds,
    }


V5E_HBM = int(15.75 * 2**30)

# decode arms: (with decode.DECODE_COMPILER_OPTIONS, pieces of the loop, caches in decode.KV_LAYOUT, the
# decode steps' attention over the filled positions only: decode.BOUNDED, with the call's sequences in
# groups of this many sharing their prompt, or None: Tunix's attention). "rljob": as the trainer compiles
# it (decode.SEGMENTS pieces, decode.laid_out); "default-layout": the same with Tunix's cache layout (the
# A/B arm of KV_LAYOUT); "segments4": in four pieces (decode.segmented_decode); "bounded": "rljob" with
# decode_attention's filled prefix; "shared": and each prompt's positions read once for its 8 generations.
DECODE_ARMS: dict[str, tuple[bool, int | None, bool, int | None]] = {
    "tunix": (False, 1, False, None),
    "default-layout": (True, None, False, None),
    "rljob": (True, None, True, None),
    "segments4": (True, 4, True, None),
    "bounded": (True, None, True, 1),
    "shared": (True, None, True, 8),
}
# the prefill (``decode.install`` compiles it without DECODE_COMPILER_OPTIONS): Tunix's layout, the trainer's
PREFILL_ARMS: dict[str, bool] = {"default-layout": False, "rljob": True}


def qwen3_0p6b(layers: int | None = None) -> Any:
    """Tunix's Qwen3-0.6B config computing in bf16 as the trainer builds it (``families.computing_in``)."""
    import jax.numpy as jnp
    from rljob_trainer.models import families
    from tunix.models.qwen3 import model as qwen3

    config = dataclasses.replace(qwen3.ModelConfig.qwen3_0p6b(), param_dtype=jnp.bfloat16)
    config = families.computing_in(config, jnp.bfloat16)
    return config if layers is None else dataclasses.replace(config, num_layers=layers)


def _setup() -> None:
    """The TPU as a compile target only (``ENV``), libtpu from ``LIBTPU_SITE``."""
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    if os.environ.get("LIBTPU_SITE"):
        sys.path.append(os.environ["LIBTPU_SITE"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("program", choices=("decode", "prefill", "train"))
    p.add_argument("--sequences", type=int, default=16, help="train: sequences of the micro-batch")
    p.add_argument("--total", type=int, default=1024, help="train: prompt + completion tokens")
    p.add_argument("--packed-rows", type=int, default=0, help="train: the packed learner on this many rows")
    p.add_argument("--row", type=int, default=8192, help="train: tokens a packed row")
    p.add_argument("--window", type=int, default=0, help="train: splash window (0: causal over the row)")
    p.add_argument(
        "--scan-layers",
        action="store_true",
        help="train: the packed layers in one lax.scan (stack.SCAN_LAYERS)",
    )
    p.add_argument(
        "--save-dots",
        choices=("mlp", "all"),
        help="train, with --scan-layers: the layers' matmul outputs kept for the backward (stack.SAVE_DOTS)",
    )
    p.add_argument("--batch", type=int, default=32, help="sequences per sampler call")
    p.add_argument("--prompt", type=int, default=384)
    p.add_argument("--cache", type=int, default=1024, help="KV cache positions (prompt + completion)")
    p.add_argument("--layers", type=int, default=None, help="fewer layers than 28 (a quicker compile)")
    p.add_argument(
        "--arm",
        choices=tuple(DECODE_ARMS),
        help="decode, prefill: one arm (default: each, in its own process)",
    )
    args = p.parse_args()
    if args.program == "train":
        _setup()
        from rljob_trainer.packing import stack

        stack.SCAN_LAYERS = args.scan_layers
        stack.SAVE_DOTS = args.save_dots
        row = train_program(
            qwen3_0p6b(args.layers),
            args.sequences,
            args.prompt,
            args.total,
            args.packed_rows,
            args.row,
            args.window,
        )
        print(json.dumps({"program": "train", **{k: v for k, v in vars(args).items() if k != "arm"}, **row}))
        return
    arms = PREFILL_ARMS if args.program == "prefill" else DECODE_ARMS
    if args.arm is not None and args.arm not in arms:
        p.error(f"--arm {args.arm}: {args.program} has the arms {', '.join(arms)}")
    if args.arm is None:  # one compile per process: a second lowering of the sampler trips over JAX's cache
        for arm in arms:
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--arm", arm], check=True)
        return
    _setup()
    from rljob_trainer import decode

    config = qwen3_0p6b(args.layers)
    if args.program == "prefill":
        row = decode_program(
            config, args.batch, args.prompt, args.cache, {}, None, PREFILL_ARMS[args.arm], prefill=True
        )
    else:
        with_options, segments, kv_layout, group = DECODE_ARMS[args.arm]
        options = decode.DECODE_COMPILER_OPTIONS if with_options else {}
        row = decode_program(
            config, args.batch, args.prompt, args.cache, options, segments, kv_layout, group=group
        )
    print(
        json.dumps(
            {"program": args.program, "arm": args.arm, "batch": args.batch, "cache": args.cache, **row}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
