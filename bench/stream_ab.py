"""A/B of the token stream on the layers alone: real widths, ``--layers`` layers, the real-shape
workload's third micro-batch (21 rows used, 62 block pairs; the six-arm run's ``ShapeCache`` held it in
24 rows and 72 pairs; a stream of 20 rows' worth), ``value_and_grad`` of the final hidden states'
squares at real tokens, per-layer remat as in training. Arms (``--arms``):

* ``rows`` (no stream), ``stream`` (gather transposes, ``adapter._move``), ``stream_v1`` (autodiff's
  scatter-add transposes), each in a 24 x 64 shape: what the stream buys;
* ``RxP`` (e.g. ``24x72,24x64,21x63``): the stream in a shape of R rows and P block pairs: what the row
  and pair bucket costs once the layers run on the stream.

Each compiled ahead, then ``--reps`` interleaved rounds; ``--trace``: one ``jax.profiler`` trace per arm
summed by op (``packing_profile.top_ops``). JSON on stdout (recorded: bench/results/stream_rows.json,
``--arms 24x72,24x64,21x63 --layers 2 --reps 2 --trace``).

    JAX_PLATFORMS=cpu .venv/bin/python bench/stream_ab.py --layers 4 --reps 3
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT / "bench")]

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from packing_arms import WIDE, real_micro_batch  # noqa: E402
from packing_profile import top_ops  # noqa: E402
from rljob_trainer.packing import adapter  # noqa: E402
from rljob_trainer.packing.example import plan_layout  # noqa: E402
from rljob_trainer.packing.rows import ShapeCache  # noqa: E402
from rljob_trainer.packing.testing import PAD_ID, tiny_model  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--arms", default="rows,stream,stream_v1")
ap.add_argument("--trace", action="store_true")
a = ap.parse_args()
ex = real_micro_batch(2)
P, C = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
g, st = nnx.split(tiny_model("qwen3", seed=0, **{**WIDE, "num_layers": a.layers}))


def v1_move(x, take, back):
    return jnp.concatenate([x, jnp.zeros((1, *x.shape[1:]), x.dtype)])[take]


def make(arm):
    rows, pairs_ = (24, 64) if arm in ("rows", "stream", "stream_v1") else map(int, arm.split("x"))
    cache = ShapeCache(max_pairs_per_row=3, shapes=[(rows, pairs_)])
    lay = plan_layout(
        P, P != PAD_ID, C, C != PAD_ID, 256, pad_id=PAD_ID, attention_block=128, shapes=cache, stream=True
    )
    bp = lay.pairs
    pairs = tuple(jnp.asarray(x) for x in (bp.row, bp.q, bp.k, bp.valid))
    tok, pos, seg = (jnp.asarray(x) for x in (lay.tokens, lay.positions, lay.segment_ids))
    stream = None if arm == "rows" else tuple(jnp.asarray(x) for x in lay.stream)
    real = seg > 0

    def f(s):
        h = adapter.packed_hidden(nnx.merge(g, s), tok, pos, seg, pairs, block=128, kv=seg, stream=stream)
        return jnp.sum(jnp.where(real[..., None], h, 0.0) ** 2)

    orig = adapter._move
    adapter._move = v1_move if arm == "stream_v1" else orig
    try:
        fn = jax.jit(jax.value_and_grad(f)).lower(st).compile()
    finally:
        adapter._move = orig
    shape = {"rows": int(lay.tokens.shape[0]), "pairs": int(bp.row.size), "stream": int(lay.stream[0].size)}
    return fn, shape


arms = {arm: make(arm) for arm in a.arms.split(",")}
out = {
    "what": __doc__.split("\n\n")[0],
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    "jax": jax.__version__,
    "layers": a.layers,
    "load_before": [round(x, 2) for x in os.getloadavg()],
    "shapes": {k: s for k, (_, s) in arms.items()},
    "seconds": {k: [] for k in arms},
}
for _ in range(a.reps):
    for k, (fn, _) in arms.items():
        t = time.perf_counter()
        jax.block_until_ready(fn(st))
        out["seconds"][k].append(round(time.perf_counter() - t, 2))
        print(k, out["seconds"][k][-1], file=sys.stderr, flush=True)
if a.trace:
    out["top_ops"] = {}
    for k, (fn, _) in arms.items():
        with tempfile.TemporaryDirectory() as d:
            jax.profiler.start_trace(d)
            jax.block_until_ready(fn(st))
            jax.profiler.stop_trace()
            out["top_ops"][k] = top_ops(d)
out["load_after"] = [round(x, 2) for x in os.getloadavg()]
print(json.dumps(out, indent=1))
