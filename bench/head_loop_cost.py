"""Cost per computed chunk of the counted head (``head_loop``) against the checkpointed ``lax.map`` head.

Why: inside the 2-layer wide train step the counted head (completion columns only) was ~1.8x the
``lax.map`` head per computed chunk (docs/packing-bench.md, "Real shape"). This times the heads alone:
``jit(value_and_grad)`` (w.r.t. hidden states and the ``[V, D]`` weight; ``count`` a traced argument,
as in training) of ``sum(a * logp)`` with the entropies returned beside it (``--entropy aux``: GRPO's
train step; ``grad``: ``+ sum(b * ent)``) for (a) ``head.chunked_token_logps`` without a count
(``lax.map`` + ``jax.checkpoint``), (b) ``count`` = every row (``head_loop.counted_token_logps``, all
chunks computed) and (c) ``count`` = half the rows (half the chunks skipped). Per arm, the arms taking
turns: median and min wall seconds of ``--reps`` warm calls, median process CPU seconds (the steadier
figure on a loaded machine), and the compiled gradient's temporary MiB (``memory_analysis``: the counted
head must keep ONE ``[V, D]`` weight-gradient buffer). JSON on stdout.

    JAX_PLATFORMS=cpu PYTHONPATH=trainer .venv/bin/python bench/head_loop_cost.py --dtype float32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any


def _time(calls: dict[str, tuple[Any, tuple]], reps: int) -> dict[str, dict[str, float]]:
    """Per arm: wall (median, min) and process CPU seconds (median) of ``reps`` warm calls; the arms
    take turns call by call, so a change in the machine's load falls on all of them alike."""
    import jax

    walls: dict[str, list[float]] = {k: [] for k in calls}
    cpus: dict[str, list[float]] = {k: [] for k in calls}
    for fn, args in calls.values():
        jax.block_until_ready(fn(*args))  # warm
    for _ in range(reps):
        for name, (fn, args) in calls.items():
            t0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn(*args))
            walls[name].append(time.perf_counter() - t0)
            cpus[name].append(time.process_time() - c0)
    return {
        k: {
            "median_s": statistics.median(walls[k]),
            "min_s": min(walls[k]),
            "cpu_s": statistics.median(cpus[k]),
        }
        for k in calls
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=32_768)
    p.add_argument("--dim", type=int, default=1_024)
    p.add_argument("--chunk", type=int, default=256)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--temperature", type=float, default=0.9, help="GRPO's sampling temperature (grpo_config)")
    p.add_argument(
        "--entropy",
        default="aux",
        choices=("aux", "grad", "off"),
        help="aux: entropies computed and returned beside the loss (as GRPO's train step: no cotangent); "
        "grad: in the objective too; off: not computed",
    )
    args = p.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np
    from rljob_trainer.packing.head import chunked_token_logps

    dtype = jnp.dtype(args.dtype)
    n = args.chunk * args.chunks
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(n, args.dim)), dtype)
    w = jnp.asarray(rng.normal(size=(args.vocab, args.dim)) / args.dim**0.5, dtype)
    t = jnp.asarray(rng.integers(0, args.vocab, n), jnp.int32)
    a, b = (jnp.asarray(rng.normal(size=n), jnp.float32) for _ in range(2))

    def f(x: jax.Array, w: jax.Array, count: Any) -> tuple[jax.Array, Any]:
        kw = {"chunk": args.chunk, "temperature": args.temperature, "entropy": args.entropy != "off"}
        logp, e = chunked_token_logps(x, t, w, dtype=dtype, count=count, **kw)
        loss = jnp.sum(a * logp)
        return (loss + jnp.sum(b * e), None) if args.entropy == "grad" else (loss, e)

    grad = jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))  # count traced, as in training
    calls, arms = {}, {}
    for name, count in (("map", None), ("loop_all", n), ("loop_half", n // 2)):
        args_ = (x, w, None if count is None else jnp.int32(count))
        compiled = grad.lower(*args_).compile()
        mem = compiled.memory_analysis()
        calls[name] = (compiled, args_)
        arms[name] = {"count": count, "temp_mib": round(mem.temp_size_in_bytes / 2**20, 1)}
    load_before = list(os.getloadavg())
    for name, timing in _time(calls, args.reps).items():
        arms[name].update({k: round(v, 3) for k, v in timing.items()})
    for arm in arms.values():
        arm["wall_vs_map"] = round(arm["median_s"] / arms["map"]["median_s"], 3)
        arm["cpu_vs_map"] = round(arm["cpu_s"] / arms["map"]["cpu_s"], 3)
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "shape": {"vocab": args.vocab, "dim": args.dim, "chunk": args.chunk, "chunks": args.chunks},
                "dtype": args.dtype,
                "entropy": args.entropy,
                "temperature": args.temperature,
                "reps": args.reps,
                "jax": jax.__version__,
                "load_before": load_before,
                "load_after": list(os.getloadavg()),
                "arms": arms,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
