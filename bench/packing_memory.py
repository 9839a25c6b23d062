"""XLA's memory analysis of the real-shape GRPO train step per arm: which arm's compiled step needs what.

Peak RSS (``bench/packing.py``) also counts the compiler and the host copies; this compiles the train
step (``value_and_grad`` of the GRPO loss, chunked head of 256 tokens, per-layer remat) of each arm on
``bench/packing.py``'s real-shape workload (``workload_gsm8k``, seed 0, first step) and prints
``memory_analysis()`` in MiB, nothing executed. An arm is ``layout:attention:head_at`` with layout
``packed`` (``plan_layout`` + ``ShapeCache``, as the bench) or ``unpacked`` (Tunix's ``[B, row]`` rows),
attention ``blocked`` or ``dense``, head at ``rows`` or ``completions``. ``--layers`` below 28 shows
what grows per layer.

    JAX_PLATFORMS=cpu .venv/bin/python bench/packing_memory.py --batch 48
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "trainer"), str(ROOT)]
ARMS = "unpacked:dense:rows,unpacked:blocked:rows,packed:blocked:rows,packed:blocked:completions,packed:dense:completions"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", type=int, default=256)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--arms", default=ARMS)
    a = ap.parse_args()

    import jax
    from flax import nnx
    from packing_arms import WIDE, unpacked_rows, workload_gsm8k
    from rljob_trainer.packing.example import pack_train_example, plan_layout
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
    from rljob_trainer.packing.rows import ShapeCache
    from rljob_trainer.packing.testing import PAD_ID, grpo_config, random_train_example, tiny_model

    ((p, c),) = workload_gsm8k(a.row, a.batch, 1, 0)
    max_p = round(0.375 * a.row)
    ex = random_train_example(p, c, max_prompt=max_p, max_completion=a.row - max_p, seed=0)
    graphdef, state = nnx.split(tiny_model("qwen3", seed=0, **WIDE, num_layers=a.layers))
    cfg, nb, out = grpo_config(), a.row // 128, {}
    for arm in a.arms.split(","):
        layout, attention, head_at = arm.split(":")
        block = 128 if attention == "blocked" else None
        if layout == "packed":
            pp, cc = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
            shapes = ShapeCache(max_pairs_per_row=nb * (nb + 1) // 2)
            plan = plan_layout(
                pp, pp != PAD_ID, cc, cc != PAD_ID, a.row, pad_id=PAD_ID, attention_block=block, shapes=shapes
            )
            inp, _ = pack_train_example(ex, a.row, pad_id=PAD_ID, layout=plan)
        else:
            inp = unpacked_rows(ex, block)
        loss = make_packed_grpo_loss_fn(attention=attention, block=128, vocab_chunk=256, head_at=head_at)

        def train(st: Any, x: Any, loss: Any = loss) -> Any:
            return jax.value_and_grad(lambda s: loss(nnx.merge(graphdef, s), x, cfg), has_aux=True)(st)

        m = jax.jit(train).lower(state, inp).compile().memory_analysis()
        out[arm] = {"rows": int(inp.tokens.shape[0])} | {
            k.removesuffix("_size_in_bytes") + "_mib": round(getattr(m, k) / 2**20)
            for k in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")
        }
        print(arm, out[arm], file=sys.stderr, flush=True)
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(json.dumps({"date_utc": date, "args": vars(a), "jax": jax.__version__, "arms": out}, indent=1))


if __name__ == "__main__":
    main()
