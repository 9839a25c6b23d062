"""What the row bucket costs once the layers run on the token stream: the real-shape workload's third
micro-batch (21 rows used, 62 block pairs; the six-arm run's ``ShapeCache`` held it in 24 rows and 72
pairs) with the stream on (20 rows' worth in every arm): rows x pairs ``24x72`` (the run's shape),
``24x64`` (a tighter pair bucket) and ``21x63`` (the rows used). Real widths, ``--layers`` layers,
``value_and_grad`` of the final hidden states' squares at real tokens (per-layer remat, as in
training); compiled ahead, ``--reps`` interleaved rounds, then one ``jax.profiler`` trace per arm
summed by op (``packing_profile.top_ops``). JSON on stdout (recorded: bench/results/stream_rows.json).

    JAX_PLATFORMS=cpu .venv/bin/python bench/stream_rows.py --layers 2 --reps 2
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

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--reps", type=int, default=3)
a = ap.parse_args()
ex = real_micro_batch(2)
P, C = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
model = tiny_model("qwen3", seed=0, **{**WIDE, "num_layers": a.layers})
g, st = nnx.split(model)


def make(shapes):
    lay = plan_layout(
        P, P != PAD_ID, C, C != PAD_ID, 256, pad_id=PAD_ID, attention_block=128, shapes=shapes, stream=True
    )
    bp = lay.pairs
    pairs = tuple(jnp.asarray(x) for x in (bp.row, bp.q, bp.k, bp.valid))
    tok, pos, seg = (jnp.asarray(x) for x in (lay.tokens, lay.positions, lay.segment_ids))
    stream = tuple(jnp.asarray(x) for x in lay.stream)
    real = seg > 0

    def f(s):
        h = adapter.packed_hidden(nnx.merge(g, s), tok, pos, seg, pairs, block=128, kv=seg, stream=stream)
        return jnp.sum(jnp.where(real[..., None], h, 0.0) ** 2)

    shape = {"rows": int(lay.tokens.shape[0]), "pairs": int(bp.row.size), "stream": int(lay.stream[0].size)}
    return jax.jit(jax.value_and_grad(f)).lower(st).compile(), shape


arms = {  # a cache holding one shape (rows, block pairs): the run's, a tighter pair bucket, the rows used
    "24x72": make(ShapeCache(max_pairs_per_row=3, shapes=[(24, 72)])),
    "24x64": make(ShapeCache(max_pairs_per_row=3, shapes=[(24, 64)])),
    "21x63": make(ShapeCache(max_pairs_per_row=3, shapes=[(21, 63)])),
}
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
out["top_ops"] = {}
for k, (fn, _) in arms.items():
    with tempfile.TemporaryDirectory() as d:
        jax.profiler.start_trace(d)
        jax.block_until_ready(fn(st))
        jax.profiler.stop_trace()
        out["top_ops"][k] = top_ops(d)
out["load_after"] = [round(x, 2) for x in os.getloadavg()]
print(json.dumps(out, indent=1))
