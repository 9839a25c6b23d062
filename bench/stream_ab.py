"""A/B of the token stream on the layers alone: real widths, ``--layers`` layers, the real-shape
workload's third micro-batch (21 rows used, held in a 24-row cache shape; a stream of 20 rows' worth),
``value_and_grad`` of the final hidden states' squares at real tokens, per-layer remat as in training.
Arms: ``rows`` (no stream), ``stream`` (gather transposes, ``adapter._move``), ``stream_v1``
(autodiff's scatter-add transposes). Each compiled ahead, then ``--reps`` interleaved rounds.

    JAX_PLATFORMS=cpu .venv/bin/python bench/stream_ab.py --layers 4 --reps 3
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "bench")]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from packing_arms import WIDE, real_micro_batch  # noqa: E402
from rljob_trainer.packing import adapter  # noqa: E402
from rljob_trainer.packing.example import plan_layout  # noqa: E402
from rljob_trainer.packing.rows import ShapeCache  # noqa: E402
from rljob_trainer.packing.testing import PAD_ID, tiny_model  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--reps", type=int, default=3)
a = ap.parse_args()
ex = real_micro_batch(2)
P, C = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
cache = ShapeCache(max_pairs_per_row=3, shapes=[(24, 64)])
lay = plan_layout(
    P, P != PAD_ID, C, C != PAD_ID, 256, pad_id=PAD_ID, attention_block=128, shapes=cache, stream=True
)
print("rows", lay.tokens.shape, "stream", lay.stream[0].shape, flush=True)
model = tiny_model("qwen3", seed=0, **{**WIDE, "num_layers": a.layers})
g, st = nnx.split(model)
bp = lay.pairs
pairs = tuple(jnp.asarray(x) for x in (bp.row, bp.q, bp.k, bp.valid))
tok, pos, seg = (jnp.asarray(x) for x in (lay.tokens, lay.positions, lay.segment_ids))
stream = tuple(jnp.asarray(x) for x in lay.stream)
real = seg > 0


def v1_move(x, take, back):
    return jnp.concatenate([x, jnp.zeros((1, *x.shape[1:]), x.dtype)])[take]


def make(use_stream):
    def f(s):
        h = adapter.packed_hidden(
            nnx.merge(g, s), tok, pos, seg, pairs, block=128, kv=seg, stream=stream if use_stream else None
        )
        return jnp.sum(jnp.where(real[..., None], h, 0.0) ** 2)

    return jax.jit(jax.value_and_grad(f))


arms = {}
arms["rows"] = make(False).lower(st).compile()
arms["stream"] = make(True).lower(st).compile()
orig = adapter._move
adapter._move = v1_move
arms["stream_v1"] = make(True).lower(st).compile()
adapter._move = orig
res = {k: [] for k in arms}
for _ in range(a.reps):
    for k, fn in arms.items():
        t = time.perf_counter()
        jax.block_until_ready(fn(st))
        res[k].append(round(time.perf_counter() - t, 2))
        print(k, res[k][-1], flush=True)
print(json.dumps(res))
