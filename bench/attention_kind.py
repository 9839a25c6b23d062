"""Block-sparse vs dense packed attention in the learner's own layout, at Qwen3-0.6B's widths.

Why: at rows of 256 tokens and blocks of 128 a row has 2 x 2 blocks, of which causality alone leaves 3,
so the block-sparse kernel (``attention.blocked_attention``) computes at most 25% fewer scores than a
dense segment-causal mask over the row (``attention="dense"``) while gathering blocks and scattering its
softmax. In the real-shape run (docs/packing-bench.md) the unpacked block-sparse train step was 3%
slower than Tunix's dense one on the same ``[48, 256]`` layout. This measures the same choice in the
packed learner's layout: each micro-batch of the real-shape workload (``workload_gsm8k``, seed 0)
planned as ``PackedGRPOLearner`` plans it (token stream on, shape cache; block pairs only for the
block-sparse kernel), head at completion columns in chunks of 256. Per arm and micro-batch: one
forward log-prob pass (what the reference and old-policy passes run) and the train step
(``value_and_grad`` of the packed GRPO loss), each compiled ahead, run once to warm, then ``--reps``
timed runs; XLA temporaries from ``memory_analysis()``. Arms run in the order given, so
``--arms blocked,dense,blocked,dense`` interleaves them. JSON on stdout.

    JAX_PLATFORMS=cpu .venv/bin/python bench/attention_kind.py --layers 4 --arms blocked,dense,blocked,dense
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "trainer"), str(ROOT)]


def timed(fn: Any, *args: Any, reps: int) -> list[float]:
    """Seconds of ``reps`` runs of ``fn(*args)`` after one warm-up run."""
    import jax

    jax.block_until_ready(fn(*args))
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        out.append(round(time.perf_counter() - t, 3))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", type=int, default=256)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--steps", type=int, default=3, help="micro-batches of the workload")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--arms", default="blocked,dense,blocked,dense")
    a = ap.parse_args()

    import jax
    from flax import nnx
    from packing_arms import WIDE, learner_layout, real_micro_batch, step_fns
    from rljob_trainer.packing.example import pack_train_example
    from rljob_trainer.packing.rows import ShapeCache
    from rljob_trainer.packing.testing import PAD_ID, grpo_config, tiny_model

    graphdef, state = nnx.split(tiny_model("qwen3", seed=0, **WIDE, num_layers=a.layers))
    cfg, nb = grpo_config(), a.row // a.block
    examples = [real_micro_batch(i, a.row, a.batch, a.steps) for i in range(a.steps)]
    out: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_before": os.getloadavg(),
        "args": vars(a),
        "jax": jax.__version__,
        "runs": [],
    }
    for kind in a.arms.split(","):
        blocked = kind == "blocked"
        shapes = ShapeCache(max_pairs_per_row=nb * (nb + 1) // 2 if blocked else 0)
        train, logps = step_fns(
            graphdef, cfg, attention=kind, block=a.block, chunk=256, head_at="completions"
        )

        for i, ex in enumerate(examples):
            layout = learner_layout(ex, a.row, a.block if blocked else None, shapes)
            inp, _ = pack_train_example(ex, a.row, pad_id=PAD_ID, layout=layout)
            step = jax.jit(train).lower(state, inp).compile()
            fwd = jax.jit(logps).lower(state, inp).compile()
            run = {
                "arm": kind,
                "micro_batch": i,
                "rows": int(inp.tokens.shape[0]),
                "pairs_computed": int(layout.pairs.valid.size) if blocked else 0,
                "train_temp_mib": round(step.memory_analysis().temp_size_in_bytes / 2**20),
                "logps_s": timed(fwd, state, inp, reps=a.reps),
                "train_s": timed(step, state, inp, reps=a.reps),
            }
            out["runs"].append(run)
            print(run, file=sys.stderr, flush=True)
    means: dict[str, dict[str, float]] = {}
    for kind in dict.fromkeys(a.arms.split(",")):
        mine = [r for r in out["runs"] if r["arm"] == kind]
        means[kind] = {k: float(np.mean([np.mean(r[k]) for r in mine])) for k in ("logps_s", "train_s")}
        means[kind]["actor_s"] = 2 * means[kind]["logps_s"] + means[kind]["train_s"]  # ref + old + train
    out["means_per_micro_batch"] = means
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
