"""Compile the trainer's TPU programs for a v5e chip on a CPU machine, without the chip: what a maintainer
reruns to see a program's HBM temporaries and XLA's buffer placement before spending chip time.

JAX compiles ahead of time against a TPU topology description (``jax.experimental.topologies``) when
libtpu is importable; nothing runs, nothing needs the device. Install the chip's libtpu beside the venv
(not into it: with libtpu present every JAX process would probe for a TPU):

    uv venv /tmp/libtpu && uv pip install -p /tmp/libtpu/bin/python libtpu==0.0.42.1
    LIBTPU_SITE=/tmp/libtpu/lib/python3.11/site-packages .venv/bin/python bench/tpu_aot.py decode

``decode``: Tunix's vanilla sampler decode loop for Qwen3-0.6B (bf16, the trainer's compute dtype), as
Tunix jits it and with ``memory.DECODE_COMPILER_OPTIONS``; prints, per arm, the copies of a whole layer
cache XLA inserts per decode step and the program's temporaries.
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


def abstract_sampler(config: Any, cache_size: int) -> Any:
    """Tunix's ``Sampler`` over an abstract model (shapes only), for lowering its decode loop."""
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
    return s


def decode_program(config: Any, batch: int, prompt: int, cache_size: int, options: dict[str, Any]) -> dict:
    """Compile the decode loop for v5e; the whole-cache copies per step and the temporaries."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = v5e_mesh()
    s = abstract_sampler(config, cache_size)
    ids = jax.ShapeDtypeStruct((batch, prompt), jnp.int32)
    state = jax.eval_shape(
        lambda i: s.init_sample_state(i, cache_size, False, None, 1.0, 1.0, None, jax.random.key(0), None),
        ids,
    )
    here = NamedSharding(mesh, P())

    def placed(tree: Any) -> Any:
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=here) if hasattr(x, "shape") else x,
            tree,
        )

    with jax.set_mesh(mesh):
        jitted = jax.jit(s._decode_fn, donate_argnums=(1,), compiler_options=options)
        compiled = jitted.lower(placed(nnx.state(s.transformer)), placed(state)).compile()
    cache = f"[{batch},{cache_size},{config.num_kv_heads},{config.head_dim}]"
    copies = [ln for ln in compiled.as_text().splitlines() if "copy-start(" in ln and cache in ln]
    return {
        "options": options,
        "whole_cache_copies_per_step": len(copies),
        "temp_bytes": compiled.memory_analysis().temp_size_in_bytes,
    }


def qwen3_0p6b(layers: int | None = None) -> Any:
    """Tunix's Qwen3-0.6B config computing in bf16 as the trainer builds it (``families.computing_in``)."""
    import jax.numpy as jnp
    from tunix.models.qwen3 import model as qwen3

    config = qwen3.ModelConfig.qwen3_0p6b()
    config = dataclasses.replace(config, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
    return config if layers is None else dataclasses.replace(config, num_layers=layers)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("program", choices=("decode",))
    p.add_argument("--batch", type=int, default=32, help="sequences per sampler call")
    p.add_argument("--prompt", type=int, default=384)
    p.add_argument("--cache", type=int, default=1024, help="KV cache positions (prompt + completion)")
    p.add_argument("--layers", type=int, default=None, help="fewer layers than 28 (a quicker compile)")
    p.add_argument(
        "--arm", choices=("tunix", "rljob"), help="one arm (default: both, each in its own process)"
    )
    args = p.parse_args()
    if args.arm is None:  # one compile per process: a second lowering of the sampler trips over JAX's cache
        for arm in ("tunix", "rljob"):
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--arm", arm], check=True)
        return
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    if os.environ.get("LIBTPU_SITE"):
        sys.path.append(os.environ["LIBTPU_SITE"])
    from rljob_trainer import memory

    options = {"tunix": {}, "rljob": memory.DECODE_COMPILER_OPTIONS}[args.arm]
    row = decode_program(qwen3_0p6b(args.layers), args.batch, args.prompt, args.cache, options)
    print(json.dumps({"arm": args.arm, "batch": args.batch, "cache": args.cache, **row}), flush=True)


if __name__ == "__main__":
    main()
