"""The FLOP model of the real-shape actor side: what ratio the learner's layout allows before any
kernel runs, against the issue's goal ``limit / (1 - h s)``.

Why: the goal counts a real token's layer and head FLOPs only (no padding, no attention). The learner
as run (``packed-headc``, before 2026-12-05 ``packed-stream-headc``) computes some padding that the goal does not: the token stream in
whole rows' worth of tokens (and a known stream size reused within one bucket step), the head in whole
chunks of ``--chunk`` completion tokens, and the shape cache's bucketed block pairs. This script plans
the real-shape run's micro-batches exactly as ``bench/packing_arms.run_arm`` does (same
``ShapeCache``, ``plan_layout(stream=True)``) and counts matmul FLOPs of one forward pass (the train
step's backward and per-layer remat multiply both arms alike):

* ``tunix``: ``[B, row]`` through every layer (projections + MLP), dense ``[row, row]`` attention per
  sequence, the head at every column;
* ``learner``: the stream's tokens through the layers, each computed block pair (``block x block``),
  the last layer's MLP and the head over whole chunks of completion tokens
  (``adapter.last_layer_tail``; ``learner_mlp_everywhere``: that MLP at every stream token, as before);
* ``no_padding``: the learner with real tokens, valid pairs and completion tokens only.

The ratios ``tunix / learner`` are the best the measured actor-side speed-up can be if every FLOP
costs the same in both arms. JSON on stdout (recorded: bench/results/flop_cap.json).

    JAX_PLATFORMS=cpu .venv/bin/python bench/flop_cap.py
"""

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "bench")]

import numpy as np  # noqa: E402
from packing import head_flop_share, layer_params  # noqa: E402
from packing_arms import WIDE, learner_layout, real_micro_batch  # noqa: E402
from rljob_trainer.packing.rows import ShapeCache  # noqa: E402

LAYER = 2 * layer_params(WIDE)  # FLOPs per token per layer
HEAD = 2 * WIDE["embed_dim"] * WIDE["vocab_size"]  # FLOPs per token of the head
SCORES = 2 * 2 * WIDE["num_heads"] * WIDE["head_dim"]  # per (query, key) pair: q.k and p.v, all heads
MLP = 2 * 3 * WIDE["embed_dim"] * WIDE["hidden_dim"]  # FLOPs per token of one layer's gated MLP


def flops(
    layers: int, tokens: int, pair_positions: int, head_tokens: int, tail_tokens: int | None = None
) -> float:
    """One forward pass; ``tail_tokens``: the tokens the last layer's MLP runs at (default: all)."""
    skipped = 0 if tail_tokens is None else tokens - tail_tokens
    return layers * (tokens * LAYER + pair_positions * SCORES) - skipped * MLP + head_tokens * HEAD


def micro_batch_flops(ex: Any, lay: Any, layers: int, row: int, block: int, chunk: int) -> dict:
    """One micro-batch's token counts and one forward pass's matmul FLOPs per arm (``lay``: the
    micro-batch's learner layout, ``learner_layout``)."""
    batch = int(np.asarray(ex.prompt_ids).shape[0])
    prompt, compl = int(np.asarray(ex.prompt_mask).sum()), int(np.asarray(ex.completion_mask).sum())
    real, stream = prompt + compl, int(lay.stream[0].size)
    chunks, pairs = math.ceil(compl / chunk), int(lay.pairs.valid.size)
    return {
        "real_tokens": real,
        "prompt_tokens": prompt,
        "completion_tokens": compl,
        "stream_tokens": stream,
        "head_chunks": chunks,
        "pairs_computed": pairs,
        "pairs_valid": lay.pairs.count,
        "tunix": flops(layers, batch * row, batch * row * row, batch * row),
        "learner": flops(layers, stream, pairs * block**2, chunks * chunk, chunks * chunk),
        "learner_mlp_everywhere": flops(layers, stream, pairs * block**2, chunks * chunk),
        "no_padding": flops(layers, real, lay.pairs.count * block**2, compl, compl),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", type=int, default=256)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=256)
    a = ap.parse_args()

    nb = a.row // a.block
    cache = ShapeCache(max_pairs_per_row=nb * (nb + 1) // 2)  # as run_arm makes it
    per_mb, tot = [], {"tunix": 0.0, "learner": 0.0, "learner_mlp_everywhere": 0.0, "no_padding": 0.0}
    real_all = prompt_all = 0
    for i in range(a.steps):
        ex = real_micro_batch(i, a.row, a.batch, a.steps)
        mb = micro_batch_flops(
            ex, learner_layout(ex, a.row, a.block, cache), a.layers, a.row, a.block, a.chunk
        )
        mb["ratio"] = mb["tunix"] / mb["learner"]
        per_mb.append(mb)
        for k in tot:
            tot[k] += mb[k]
        real_all, prompt_all = real_all + mb["real_tokens"], prompt_all + mb["prompt_tokens"]

    limit = a.steps * a.batch * a.row / real_all
    h, s = head_flop_share(WIDE, a.layers), prompt_all / real_all
    goal = limit / (1 - h * s)
    out = {
        "args": vars(a),
        "micro_batches": per_mb,
        "token_ratio_limit": limit,
        "goal": goal,
        "cap_as_run": tot["tunix"] / tot["learner"],
        "cap_as_run_pct_of_goal": 100 * tot["tunix"] / tot["learner"] / goal,
        "cap_mlp_everywhere": tot["tunix"] / tot["learner_mlp_everywhere"],
        "cap_mlp_everywhere_pct_of_goal": 100 * tot["tunix"] / tot["learner_mlp_everywhere"] / goal,
        "cap_no_padding": tot["tunix"] / tot["no_padding"],
        "cap_no_padding_pct_of_goal": 100 * tot["tunix"] / tot["no_padding"] / goal,
        "attention_share_tunix": a.layers * a.steps * a.batch * a.row**2 * SCORES / tot["tunix"],
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
