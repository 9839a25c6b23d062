"""Profile of the benchmark's wide (Qwen3-0.6B widths) GRPO train step: where its time goes.

One micro-batch of ``bench/packing.py``'s wide workload (8 sequences, rows of 256), the train step
(``value_and_grad`` of the GRPO loss, chunked head of 256 tokens) packed (block-sparse) and unpacked
(Tunix's layout, block-sparse, so the two differ only by packing). Per arm: XLA's cost-analysis FLOP
count of the whole step and of the head alone (XLA counts a while loop's body once, i.e. ONE head chunk
of ``CHUNK`` tokens, not all of them), one warm timed run, and a ``jax.profiler`` trace of a second run
whose CPU thunk events are summed by name (top ops; events of all threads, so the sum can differ from the wall time). JSON on
stdout.

    JAX_PLATFORMS=cpu .venv/bin/python bench/packing_profile.py > bench/results/packing_profile.json
"""

from __future__ import annotations

import collections
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "trainer"), str(ROOT)]

ROW, BATCH, CHUNK, TOP = 256, 8, 256, 12


def thunk_events(trace_dir: str) -> dict[str, tuple[float, int]]:
    """XLA:CPU thunk events of the trace by full name (``ynn_fusion.7``: an instruction of the compiled
    HLO): (seconds summed over all threads, events)."""
    import jax

    path = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0]
    total: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for plane in jax.profiler.ProfileData.from_file(path).planes:
        for line in plane.lines:
            if "PjRtCpuClient" not in line.name and "XLAEigen" not in line.name:
                continue  # the thunk executor's lines; python / metadata lines are not ops
            for ev in line.events:
                if ev.name.startswith(("Threadpool", "ThunkExecutor", "end:")):
                    continue
                total[ev.name] += ev.duration_ns / 1e9
                count[ev.name] += 1
    return {k: (v, count[k]) for k, v in total.items()}


def top_ops(trace_dir: str, top: int | None = TOP) -> list[dict[str, Any]]:
    """CPU thunk events of the trace, summed by name (numeric suffixes dropped), longest first (``top``
    of them; None: all)."""
    total: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for name, (seconds, events) in thunk_events(trace_dir).items():
        total[name.split(".")[0]] += seconds
        count[name.split(".")[0]] += events
    return [{"op": k, "seconds": round(v, 3), "events": count[k]} for k, v in total.most_common(top)]


def main() -> None:
    import jax
    from flax import nnx
    from packing_arms import WIDE, unpacked_rows, workload
    from rljob_trainer.packing.example import pack_train_example
    from rljob_trainer.packing.head import chunked_token_logps, head_weight
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
    from rljob_trainer.packing.testing import PAD_ID, grpo_config, random_train_example, tiny_model

    ((p, c),) = workload(ROW, BATCH, 1, 0)
    ex = random_train_example(p, c, max_prompt=4, max_completion=ROW - 4, seed=0)
    model = tiny_model("qwen3", seed=0, **WIDE, num_layers=2)
    g, st = nnx.split(model)
    cfg = grpo_config()
    packed, plan = pack_train_example(ex, ROW, pad_id=PAD_ID, attention_block=128)
    out: dict[str, Any] = {
        "what": "wide GRPO train step (value_and_grad), 2 layers, Qwen3-0.6B widths, fp32, CPU",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()} cores",
        "jax": jax.__version__,
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "real_tokens": int(sum(p) + sum(c)),
    }
    loss_fn = make_packed_grpo_loss_fn(attention="blocked", block=128, vocab_chunk=CHUNK)
    for name, inp in (("packed", packed), ("unpacked_blocked", unpacked_rows(ex, 128))):

        def step(s: Any, x: Any) -> Any:
            return jax.value_and_grad(lambda s: loss_fn(nnx.merge(g, s), x, cfg)[0])(s)

        rows, cols = inp.tokens.shape
        hidden = jax.ShapeDtypeStruct((rows, cols - 1, WIDE["embed_dim"]), "float32")

        def head(h: Any, w: Any, t: Any = inp.tokens[:, 1:]) -> Any:
            f = lambda h, w: chunked_token_logps(h, t, w, chunk=CHUNK, entropy=True)[0].sum()  # noqa: E731
            return jax.value_and_grad(f, argnums=(0, 1))(h, w)

        compiled = jax.jit(step).lower(st, inp).compile()
        head_c = jax.jit(head).lower(hidden, head_weight(model)).compile()
        arm: dict[str, Any] = {
            "rows": rows,
            "head_tokens": rows * (cols - 1),
            "xla_step_gflop_one_chunk": round(compiled.cost_analysis()["flops"] / 1e9, 1),
            "xla_head_fwd_bwd_gflop_one_chunk": round(head_c.cost_analysis()["flops"] / 1e9, 1),
        }
        jax.block_until_ready(compiled(st, inp))  # warm
        t = time.perf_counter()
        jax.block_until_ready(compiled(st, inp))
        arm["step_seconds"] = round(time.perf_counter() - t, 2)
        with tempfile.TemporaryDirectory() as d:
            with jax.profiler.trace(d):
                t = time.perf_counter()
                jax.block_until_ready(compiled(st, inp))
                arm["traced_step_seconds"] = round(time.perf_counter() - t, 2)
            arm["top_ops"] = top_ops(d)
        arm["load"] = [round(x, 2) for x in os.getloadavg()]
        out[name] = arm
        print(json.dumps({name: arm}), file=sys.stderr, flush=True)
    out["rows_used"] = plan.rows_used
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
