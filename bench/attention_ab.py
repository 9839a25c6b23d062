"""A/B of the block-sparse attention's memory fix inside the whole packed GRPO train step.

The fix (``packing/attention.py``): the softmax scatters start from buffers built from their layer's own
values (``_filled``) and the block gathers have a ``custom_vjp`` whose backward scatters into such a
buffer (``_take_blocks``), so XLA cannot hoist merged constant buffers to the start of the step. Arm
``before`` swaps both back to what they replaced (``jnp.full`` buffers, autodiff's own gather
transpose); arm ``fixed`` is the code as it is. Per arm: the train step (``value_and_grad`` of the GRPO
loss, block-sparse attention, blocks of 128, head in chunks of 256) on the first micro-batch of
``bench/packing.py``'s real-shape workload (``workload_gsm8k``, seed 0), compiled once, one warm-up,
``--reps`` timed runs; XLA's temporaries from ``memory_analysis()``. Arms run in the order given, so
``--arms fixed,before,fixed,before`` interleaves them. JSON on stdout.

    JAX_PLATFORMS=cpu .venv/bin/python bench/attention_ab.py --layers 4 --arms fixed,before,fixed,before
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", type=int, default=256)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--head-at", default="completions", choices=("rows", "completions"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--arms", default="fixed,before,fixed,before")
    a = ap.parse_args()

    import jax
    import jax.numpy as jnp
    from flax import nnx
    from packing_arms import WIDE, workload_gsm8k
    from rljob_trainer.packing import attention
    from rljob_trainer.packing.example import pack_train_example, plan_layout
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
    from rljob_trainer.packing.rows import ShapeCache
    from rljob_trainer.packing.testing import PAD_ID, grpo_config, random_train_example, tiny_model

    def full(anchor: Any, shape: tuple[int, ...], value: float) -> Any:
        return jnp.full(shape, value, anchor.dtype)

    def plain_take(x: Any, rows: Any, blocks: Any) -> Any:
        return x[rows, blocks]

    variants = {"fixed": (attention._filled, attention._take_blocks), "before": (full, plain_take)}

    ((p, c),) = workload_gsm8k(a.row, a.batch, 1, 0)
    max_p = round(0.375 * a.row)
    ex = random_train_example(p, c, max_prompt=max_p, max_completion=a.row - max_p, seed=0)
    graphdef, state = nnx.split(tiny_model("qwen3", seed=0, **WIDE, num_layers=a.layers))
    cfg, nb = grpo_config(), a.row // 128
    pp, cc = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
    shapes = ShapeCache(max_pairs_per_row=nb * (nb + 1) // 2)
    plan = plan_layout(
        pp, pp != PAD_ID, cc, cc != PAD_ID, a.row, pad_id=PAD_ID, attention_block=128, shapes=shapes
    )
    inp, _ = pack_train_example(ex, a.row, pad_id=PAD_ID, layout=plan)
    out: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_before": os.getloadavg(),
        "args": vars(a),
        "jax": jax.__version__,
        "rows": int(inp.tokens.shape[0]),
        "runs": [],
    }
    for name in a.arms.split(","):
        attention._filled, attention._take_blocks = variants[name]  # read at trace time, below
        loss = make_packed_grpo_loss_fn(attention="blocked", block=128, vocab_chunk=256, head_at=a.head_at)

        def train(st: Any, x: Any, loss: Any = loss) -> Any:
            return jax.value_and_grad(lambda s: loss(nnx.merge(graphdef, s), x, cfg), has_aux=True)(st)

        step = jax.jit(train).lower(state, inp).compile()
        temp = step.memory_analysis().temp_size_in_bytes / 2**20
        jax.block_until_ready(step(state, inp))
        times = []
        for _ in range(a.reps):
            t = time.perf_counter()
            jax.block_until_ready(step(state, inp))
            times.append(round(time.perf_counter() - t, 2))
        out["runs"].append({"arm": name, "temp_mib": round(temp), "wall_s": times})
        print(out["runs"][-1], file=sys.stderr, flush=True)
    attention._filled, attention._take_blocks = variants["fixed"]
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
