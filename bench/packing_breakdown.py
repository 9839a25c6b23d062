"""Timing breakdown of the benchmark's wide (Qwen3-0.6B widths) train step, packed vs unpacked dense:
the layers alone (value_and_grad of sum(hidden states)) vs the whole GRPO step with the chunked head.
First micro-batch of ``bench/packing.py``'s wide workload; 2 timed runs each; JSON on stdout.

    JAX_PLATFORMS=cpu .venv/bin/python bench/packing_breakdown.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "trainer"), str(ROOT)]


def main() -> None:
    import jax
    from flax import nnx
    from packing_arms import WIDE, unpacked_rows, workload
    from rljob_trainer.packing.adapter import packed_hidden
    from rljob_trainer.packing.example import pack_train_example
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
    from rljob_trainer.packing.testing import PAD_ID, grpo_config, random_train_example, tiny_model

    row, batch = 256, 8
    ((p, c),) = workload(row, batch, 1, 0)
    ex = random_train_example(p, c, max_prompt=4, max_completion=row - 4, seed=0)
    g, st = nnx.split(tiny_model("qwen3", seed=0, **WIDE, num_layers=2))
    cfg = grpo_config()
    packed, _ = pack_train_example(ex, row, pad_id=PAD_ID, attention_block=128)
    out: dict[str, Any] = {"load_before": os.getloadavg()}
    for name, inp, att in (
        ("packed", packed, "blocked"),
        ("unpacked_dense", unpacked_rows(ex, None), "dense"),
    ):
        loss_fn = make_packed_grpo_loss_fn(attention=att, block=128, vocab_chunk=256)
        blocked = att == "blocked"

        def full(s: Any, x: Any, loss_fn: Any = loss_fn) -> Any:
            return jax.value_and_grad(lambda s: loss_fn(nnx.merge(g, s), x, cfg)[0])(s)

        def layers(s: Any, x: Any, blocked: bool = blocked) -> Any:
            def f(s: Any) -> Any:
                h = packed_hidden(
                    nnx.merge(g, s),
                    x.tokens,
                    x.positions,
                    x.segment_ids,
                    x.pairs if blocked else None,
                    block=128,
                    kv=x.kv_segment_ids,
                )
                return h.sum()

            return jax.value_and_grad(f)(s)

        for what, fn in (("layers_fwd_bwd", layers), ("train_step", full)):
            compiled = jax.jit(fn).lower(st, inp).compile()
            times = []
            for _ in range(2):
                t = time.perf_counter()
                jax.block_until_ready(compiled(st, inp))
                times.append(time.perf_counter() - t)
            out[f"{name}/{what}"] = times
    out["load_after"] = os.getloadavg()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
