"""Where the learner's actor side costs more per FLOP than Tunix's: a per-op profile of both arms of the
actor-side goal at two depths.

Why: the issue's actor-side goal (learner vs Tunix's unpacked path, ``limit / (1 - h s)``) sits at the
learner's FLOP bound (``bench/flop_cap.py``: 99.9% of the goal if every FLOP costs the same), and the
28-layer runs measure 92.9-100.9% of it. Per micro-batch the learner's train step gets 2.62-2.69x where
its FLOPs allow 2.83x, so each of its FLOPs costs more than one of Tunix's. This says which operation
holds that time.

Arms, on micro-batch ``--micro-batch`` of the real-shape workload (``real_micro_batch``), Qwen3-0.6B
widths, random fp32 weights: ``tunix`` (``[B, row]`` rows, dense masked attention, head at every column:
``bench/packing_arms``' tunix arm) and ``learner`` (``packed-headc``: planned as ``PackedGRPOLearner``
plans it, token stream, block-sparse attention, head and last-layer tail at completion columns). For
each ``--layers`` depth and arm, the log-prob pass (the reference and old-policy passes) and the train
step (``value_and_grad`` of the GRPO loss) are compiled ahead, run once to warm, once timed and once
under ``jax.profiler``; the traced run's XLA:CPU thunk events are summed by ``category`` (head, layer,
attention and tail matmuls; gathers and scatters; copies; elementwise ops; from the compiled HLO's op
names), in thread seconds. ``compare``: both arms per category, the matmuls' GFLOP/s and what each
category costs the learner beyond Tunix's rate. Two depths separate what each layer costs from what is
paid once (embedding, head, loss): per layer = (t(L2) - t(L1)) / (L2 - L1), once = t(L1) - L1 x per
layer, for the wall time and every category. FLOPs: ``flop_cap``'s model of one forward pass (matmuls
and attention scores; the train step runs ~4x them with per-layer remat in both arms). JSON on stdout.

Also ``projected``: every category linear in depth through the two depths (the head and the last
layer's tail at their mean: paid once), at ``--project`` layers (28: Qwen3-0.6B), for both passes and the
actor side (reference + old-policy + train); ``--summarize`` recomputes the summaries from a recorded run.

    JAX_PLATFORMS=cpu .venv/bin/python bench/op_profile.py --layers 1,8 > bench/results/op_profile.json
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "trainer"), str(ROOT)]


# What each XLA:CPU thunk of a traced step is, from the compiled HLO's ``op_name`` metadata (JAX names
# every op by its trace path: ``while/body`` is a chunk loop, ``feed_forward`` the MLP, ``einsum/BTD,DNH``
# a projection, the ``KG`` einsums attention's scores and weighted values). YNNPACK fusions and dots are
# the matmuls; the rest is named by what it moves or computes.
MATMULS = ("head matmuls", "layer matmuls", "attention matmuls", "tail matmuls")
ONCE = ("head matmuls", "head loop, other ops", "tail matmuls")  # paid once per pass, whatever the depth


def category(name: str, op_name: str) -> str:
    """The category of thunk ``name`` whose HLO instruction carries ``op_name``."""
    in_loop = "while" in op_name
    if name.startswith(("ynn_fusion", "dot")):
        if in_loop:
            return "tail matmuls" if "feed_forward" in op_name else "head matmuls"
        return "attention matmuls" if "KG" in op_name else "layer matmuls"
    if in_loop:
        return "head loop, other ops"
    if "scatter" in name or "gather" in name or "scatter" in op_name or "gather" in op_name:
        return "gathers and scatters"
    if "copy" in name or "transpose" in name:
        return "copies and transposes"
    return "elementwise and reductions"


def categories(events: dict[str, tuple[float, int]], hlo: str) -> dict[str, float]:
    """Seconds of a trace's thunk events by ``category``."""
    op_names: dict[str, str] = {}
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name=\"([^\"]*)\"", line)
        if m:
            op_names[m.group(1)] = m.group(2)
    out: collections.Counter[str] = collections.Counter()
    for name, (seconds, _) in events.items():
        if not name.startswith(("while", "cond", "call", "SlinkyThreadPool")):  # containers, waits
            out[category(name, op_names.get(name, ""))] += seconds
    return {k: round(v, 3) for k, v in out.most_common()}


def measure(compiled: Any, *args: Any) -> dict[str, Any]:
    """One warm run, one timed run, one traced run of ``compiled(*args)``: seconds, the trace's
    seconds by category and its top ops."""
    import jax
    from packing_profile import thunk_events, top_ops

    jax.block_until_ready(compiled(*args))
    t = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    out: dict[str, Any] = {"seconds": round(time.perf_counter() - t, 3)}
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            t = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            out["traced_seconds"] = round(time.perf_counter() - t, 3)
        out["categories"] = categories(thunk_events(d), compiled.as_text())
        out["top_ops"] = {o["op"]: [o["seconds"], o["events"]] for o in top_ops(d)}
    return out


def category_flops(
    fl: dict, layers: int, arm: str, row: int, batch: int, block: int, chunk: int
) -> dict[str, float]:
    """One forward pass's matmul FLOPs by category (``fl``: ``flop_cap.micro_batch_flops``)."""
    from flop_cap import HEAD, LAYER, MLP, SCORES

    if arm == "tunix":
        tokens, pairs, head, tail = batch * row, batch * row * row, batch * row, batch * row
    else:
        tokens, pairs = fl["stream_tokens"], fl["pairs_computed"] * block**2
        head = tail = fl["head_chunks"] * chunk
    in_layers = layers * tokens * LAYER - (tokens * MLP if arm != "tunix" else 0)
    return {
        "head matmuls": head * HEAD,
        "layer matmuls": in_layers,
        "attention matmuls": layers * pairs * SCORES,
        "tail matmuls": tail * MLP if arm != "tunix" else 0.0,
    }


PASS_FLOPS = {
    "logps": 1,
    "train": 4,
}  # forward passes' worth: train = forward, remat recompute, backward (2x)


def per_layer(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per layer and once (depth-independent) seconds, of the wall time and of each category, from the
    first two depths."""
    (l1, r1), (l2, r2) = sorted(runs.items())[:2]
    out: dict[str, Any] = {}
    for key in ("seconds", "traced_seconds"):
        slope = (r2[key] - r1[key]) / (l2 - l1)
        out[key] = {"per_layer": round(slope, 3), "once": round(r1[key] - l1 * slope, 3)}
    for c in set(r1["categories"]) | set(r2["categories"]):
        t1, t2 = r1["categories"].get(c, 0.0), r2["categories"].get(c, 0.0)
        slope = (t2 - t1) / (l2 - l1)
        out[c] = {"per_layer": round(slope, 3), "once": round(t1 - l1 * slope, 3)}
    return out


def compare(tunix: dict, learner: dict, flops: dict[str, dict[str, float]], mult: int) -> dict[str, Any]:
    """Both arms' seconds by category, the matmuls' GFLOP/s, and what each category costs the learner
    beyond Tunix's rate: a matmul category against Tunix's GFLOP/s for the same category, any other
    against Tunix's seconds scaled by the whole pass's FLOP ratio (their work follows the matmuls')."""
    total = {arm: sum(f.values()) for arm, f in flops.items()}
    ratio = total["tunix"] / total["learner"]
    rows: dict[str, Any] = {}
    for c in sorted(set(tunix["categories"]) | set(learner["categories"]), key=lambda c: c not in MATMULS):
        t, lr = tunix["categories"].get(c, 0.0), learner["categories"].get(c, 0.0)
        row: dict[str, Any] = {"tunix_s": t, "learner_s": lr}
        if c in MATMULS:
            ft, fl = mult * flops["tunix"][c], mult * flops["learner"][c]
            row.update(
                tunix_gflop_s=round(ft / t / 1e9) if t else None,
                learner_gflop_s=round(fl / lr / 1e9) if lr else None,
            )
            ref = c if ft else "layer matmuls"  # the tail has no Tunix counterpart: the layers' rate
            at_tunix = fl * tunix["categories"].get(ref, 0.0) / (mult * flops["tunix"][ref])
        else:
            at_tunix = t / ratio
        row["learner_excess_s"] = round(lr - at_tunix, 3)
        rows[c] = row
    return {
        "seconds": {"tunix": tunix["seconds"], "learner": learner["seconds"]},
        "time_ratio": round(tunix["seconds"] / learner["seconds"], 3),
        "flop_ratio": round(ratio, 3),
        "learner_excess_s": round(learner["seconds"] - tunix["seconds"] / ratio, 3),
        "categories": rows,
    }


def project(runs: dict[int, dict[str, Any]], depth: int) -> dict[str, Any]:
    """A run's seconds and categories at ``depth`` layers, linear in depth through the first two depths
    measured (every layer is the same work); the categories paid once per pass (``ONCE``: the head and
    the last layer's tail) at the mean of the two depths, so their step-to-step noise is not multiplied."""
    (l1, r1), (l2, r2) = sorted(runs.items())[:2]

    def at(v1: float, v2: float) -> float:
        return round(v1 + (depth - l1) * (v2 - v1) / (l2 - l1), 3)

    def cat(c: str) -> float:
        v1, v2 = r1["categories"].get(c, 0.0), r2["categories"].get(c, 0.0)
        return round((v1 + v2) / 2, 3) if c in ONCE else at(v1, v2)

    cats = set(r1["categories"]) | set(r2["categories"])
    return {"seconds": at(r1["seconds"], r2["seconds"]), "categories": {c: cat(c) for c in cats}}


def summarize(out: dict[str, Any], a: argparse.Namespace) -> None:
    """Adds to ``out`` (its ``runs`` and ``flops_forward``): ``compare`` per pass and depth,
    ``per_layer`` per arm and pass, and ``projected``: the same comparison at ``--project`` layers and
    the actor side there (reference + old-policy log-prob passes + train step)."""
    runs = {
        arm: {p: {int(L): r for L, r in d.items()} for p, d in passes.items()}
        for arm, passes in out["runs"].items()
    }
    fl = {int(L): f for L, f in out["flops_forward"].items()}
    depths = [*sorted(fl), a.project]

    def cat_flops(L: int) -> dict[str, dict[str, float]]:
        f = fl[min(fl)]  # token, pair and chunk counts do not depend on depth
        return {
            arm: category_flops(f, L, arm, a.row, a.batch, a.block, a.chunk) for arm in ("tunix", "learner")
        }

    out["compare"] = {
        p: {L: compare(runs["tunix"][p][L], runs["learner"][p][L], cat_flops(L), m) for L in depths[:-1]}
        for p, m in PASS_FLOPS.items()
    }
    out["per_layer"] = {arm: {p: per_layer(r) for p, r in passes.items()} for arm, passes in runs.items()}
    proj = {p: {arm: project(runs[arm][p], a.project) for arm in runs} for p in PASS_FLOPS}
    cmp = {
        p: compare(proj[p]["tunix"], proj[p]["learner"], cat_flops(a.project), m)
        for p, m in PASS_FLOPS.items()
    }
    actor = {arm: 2 * proj["logps"][arm]["seconds"] + proj["train"][arm]["seconds"] for arm in runs}
    flops = {
        arm: sum(cat_flops(a.project)[arm].values()) * (2 * PASS_FLOPS["logps"] + PASS_FLOPS["train"])
        for arm in runs
    }
    excess = {
        c: round(
            2 * cmp["logps"]["categories"].get(c, {}).get("learner_excess_s", 0.0)
            + cmp["train"]["categories"].get(c, {}).get("learner_excess_s", 0.0),
            3,
        )
        for c in set(cmp["logps"]["categories"]) | set(cmp["train"]["categories"])
    }
    out["projected"] = {
        "layers": a.project,
        "compare": cmp,
        "actor_side": {
            "seconds": {arm: round(v, 3) for arm, v in actor.items()},
            "time_ratio": round(actor["tunix"] / actor["learner"], 3),
            "flop_ratio": round(flops["tunix"] / flops["learner"], 3),
            "learner_excess_s": round(
                actor["learner"] - actor["tunix"] * flops["learner"] / flops["tunix"], 3
            ),
            "learner_excess_s_by_category": dict(sorted(excess.items(), key=lambda kv: -kv[1])),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="1,8", help="two depths (comma-separated)")
    ap.add_argument("--micro-batch", type=int, default=0, help="of the real-shape run's three")
    ap.add_argument("--row", type=int, default=256)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--arms", default="tunix,learner")
    ap.add_argument("--project", type=int, default=28, help="depth to project the two depths to")
    ap.add_argument(
        "--summarize", metavar="JSON", help="recompute the summaries of a recorded run, no profiling"
    )
    a = ap.parse_args()
    if a.summarize:
        out = json.loads(Path(a.summarize).read_text())
        summarize(out, argparse.Namespace(**{**out["args"], "project": a.project}))
        print(json.dumps(out, indent=1))
        return

    import jax
    from flax import nnx
    from flop_cap import micro_batch_flops
    from packing_arms import WIDE, learner_layout, real_micro_batch, step_fns, unpacked_rows
    from rljob_trainer.packing.example import pack_train_example
    from rljob_trainer.packing.rows import ShapeCache
    from rljob_trainer.packing.testing import PAD_ID, grpo_config, tiny_model

    cfg, nb = grpo_config(), a.row // a.block
    # As run_arm: one ShapeCache through the run's micro-batches, so the planned shapes are the run's.
    cache = ShapeCache(max_pairs_per_row=nb * (nb + 1) // 2)
    for i in range(a.micro_batch + 1):
        ex = real_micro_batch(i, a.row, a.batch)
        layout = learner_layout(ex, a.row, a.block, cache)
    depths = [int(x) for x in a.layers.split(",")]
    out: dict[str, Any] = {
        "what": "per-op profile of the actor side's two arms (tunix, learner) at two depths, Qwen3-0.6B widths, fp32, CPU",
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "args": vars(a),
        "jax": jax.__version__,
        "flops_forward": {L: micro_batch_flops(ex, layout, L, a.row, a.block, a.chunk) for L in depths},
        "runs": {},
    }
    inputs = {
        "tunix": (unpacked_rows(ex, None), "dense", "rows"),
        "learner": (pack_train_example(ex, a.row, pad_id=PAD_ID, layout=layout)[0], "blocked", "completions"),
    }
    for L in depths:
        graphdef, state = nnx.split(tiny_model("qwen3", seed=0, **WIDE, num_layers=L))
        for arm in a.arms.split(","):
            inp, attention, head_at = inputs[arm]
            train, logps = step_fns(
                graphdef, cfg, attention=attention, block=a.block, chunk=a.chunk, head_at=head_at
            )
            for name, fn in (("logps", logps), ("train", train)):
                compiled = jax.jit(fn).lower(state, inp).compile()
                run = {**measure(compiled, state, inp), "load": [round(x, 2) for x in os.getloadavg()]}
                out["runs"].setdefault(arm, {}).setdefault(name, {})[L] = run
                print(f"{arm} {name} L={L}: {run['seconds']} s", file=sys.stderr, flush=True)
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if len(depths) == 2 and set(out["runs"]) == {"tunix", "learner"}:
        summarize(out, a)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
