"""Packing benchmark: actor-train seconds per step, packed vs unpacked, on identical samples.

A seed-shaped GRPO workload scaled to a small CPU: rows of ``--row`` tokens; prompts ~1.2% of the row,
completions ~36% of the row on average with varied lengths, and the longest sequence exactly a row (so
the unpacked batch is ``[batch, row]``, as Tunix pads it to max prompt + max completion). Both arms train
the same tiny random model (fp32, SGD with lr 0 so every step sees the same weights) on the same
pre-generated micro-batches with the same jitted train step as Tunix's ``PeftTrainer._train_step``
(value_and_grad of the loss + optimizer update); only the loss differs: Tunix's ``grpo_loss_fn`` on the
unpacked ``TrainExample`` vs ``make_packed_grpo_loss_fn`` on its packed rows.

Each arm runs in its own process so peak RSS is per arm. Shapes are compiled in a warm-up pass over all
batches, then ``--steps`` batches are timed. Prints a table and writes JSON (``--out``).

    JAX_PLATFORMS=cpu .venv/bin/python bench/packing.py            # ~3-4 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT)]


def workload(row: int, batch: int, steps: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """Per step: (prompt lengths, completion lengths); identical for both arms."""
    rng = np.random.default_rng(seed)
    max_p = max(2, round(0.015 * row))
    max_c = row - max_p
    out = []
    for _ in range(steps):
        p = rng.integers(max(1, round(0.009 * row)), max_p + 1, batch)
        c = np.clip(rng.gamma(2.0, 0.18 * row, batch).astype(int), 1, max_c)
        i = int(rng.integers(batch))
        p[i], c[i] = max_p, max_c  # the longest sequence fills a row exactly
        out.append((p.tolist(), c.tolist()))
    return out


def run_arm(arm: str, args: argparse.Namespace) -> dict:
    import jax
    import optax
    from flax import nnx
    from rljob_trainer.packing.example import pack_train_example
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
    from rljob_trainer.packing.rows import ShapeCache
    from rljob_trainer.packing.testing import EOS_ID, PAD_ID, grpo_config, random_train_example, tiny_model
    from tunix.rl.algo_core import grpo_loss_fn

    batches = workload(args.row, args.batch, args.steps, args.seed)
    max_p = max(2, round(0.015 * args.row))
    model = tiny_model(args.family, seed=0)
    optimizer = nnx.Optimizer(model, optax.sgd(0.0), wrt=nnx.Param)
    cfg = grpo_config()
    examples = [
        random_train_example(p, c, max_prompt=max_p, max_completion=args.row - max_p, seed=i)
        for i, (p, c) in enumerate(batches)
    ]
    stats = {"real_tokens": 0, "padded_tokens": 0, "rows_used": 0, "rows": 0, "pairs": 0}
    if arm == "unpacked":
        loss = lambda m, ex: grpo_loss_fn(m, ex, cfg, pad_id=PAD_ID, eos_id=EOS_ID)  # noqa: E731
        inputs = examples
    else:
        attention = "blocked" if arm == "packed" else "dense"
        block = args.block if attention == "blocked" else None
        packed_loss = make_packed_grpo_loss_fn(attention=attention, block=args.block)
        loss = lambda m, ex: packed_loss(m, ex, cfg)  # noqa: E731
        inputs = []
        # As PackedGRPOLearner does: one shape cache for the run, so steps reuse compiled shapes.
        nb = args.row // args.block if block else 0
        cache = ShapeCache(max_pairs_per_row=nb * (nb + 1) // 2)
        for ex in examples:
            pex, plan = pack_train_example(ex, args.row, pad_id=PAD_ID, attention_block=block, shapes=cache)
            inputs.append(pex)
            stats["rows_used"] += plan.rows_used
            stats["rows"] += plan.num_rows
            stats["pairs"] += int(pex.pair_valid.sum()) if pex.pair_valid is not None else 0
    for ex in examples:
        stats["real_tokens"] += int(np.asarray(ex.prompt_mask).sum() + np.asarray(ex.completion_mask).sum())
        stats["padded_tokens"] += int(ex.prompt_ids.size + ex.completion_ids.size)

    @nnx.jit
    def train_step(model, optimizer, ex):
        (value, _), grads = nnx.value_and_grad(loss, has_aux=True)(model, ex)
        optimizer.update(model, grads)
        return value

    t0 = time.perf_counter()
    shapes = set()
    for ex in inputs:  # compile every distinct shape once
        key = tuple(x.shape for x in jax.tree.leaves(ex))
        if key not in shapes:
            shapes.add(key)
            jax.block_until_ready(train_step(model, optimizer, ex))
    compile_s = time.perf_counter() - t0
    times, cpu = [], []
    for ex in inputs:
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(train_step(model, optimizer, ex))
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return {
        "arm": arm,
        "s_per_step": float(np.mean(times)),
        "cpu_s_per_step": float(np.mean(cpu)),
        "s_per_step_median": float(np.median(times)),
        "compile_s": compile_s,
        "shapes": len(shapes),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **stats,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", type=int, default=512, help="row length = max prompt + max completion")
    ap.add_argument("--batch", type=int, default=96, help="sequences per micro-batch (prompts x G)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--block", type=int, default=128, help="block-sparse attention block")
    ap.add_argument("--family", default="qwen3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arms", default="unpacked,packed,packed-dense")
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args.arm, args)))
        return
    results = {}
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    for arm in args.arms.split(","):
        cmd = [sys.executable, __file__, "--arm", arm, *sys.argv[1:]]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
        results[arm] = json.loads(out.strip().splitlines()[-1])
        print(f"{arm:>13}: {results[arm]['s_per_step']:.3f} s/step", flush=True, file=sys.stderr)
    base = results["unpacked"]
    limit = base["padded_tokens"] / base["real_tokens"]
    print(
        f"\nrow {args.row}, {args.batch} sequences/micro-batch, {args.steps} steps, {args.family} tiny fp32"
    )
    print(f"token-ratio limit (padded / real tokens, unpacked): {limit:.2f}x")
    print("s/step is wall time; cpu s/step is the process's CPU time (steadier on a shared machine)")
    print(
        f"{'arm':>13} {'s/step':>8} {'speed-up':>9} {'% of limit':>10} {'cpu s/step':>10} {'cpu speed-up':>12} "
        f"{'rows/step':>9} {'row util':>8} {'shapes':>6} {'compile s':>9} {'peak RSS MiB':>12}"
    )
    for arm, r in results.items():
        speed = base["s_per_step"] / r["s_per_step"]
        rows = r["rows"] / args.steps if r["rows"] else args.batch
        util = (
            r["real_tokens"] / (r["rows_used"] * args.row)
            if r["rows_used"]
            else r["real_tokens"] / r["padded_tokens"]
        )
        cpu_speed = base["cpu_s_per_step"] / r["cpu_s_per_step"]
        r.update(
            speedup=speed,
            cpu_speedup=cpu_speed,
            pct_of_limit=speed / limit,
            row_utilization=util,
            limit=limit,
        )
        print(
            f"{arm:>13} {r['s_per_step']:8.3f} {speed:8.2f}x {100 * speed / limit:9.0f}% "
            f"{r['cpu_s_per_step']:10.3f} {cpu_speed:11.2f}x {rows:9.2f} "
            f"{100 * util:7.1f}% {r['shapes']:6d} {r['compile_s']:9.1f} {r['peak_rss_mib']:12.0f}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
