"""Packing benchmark: what packing buys on the actor side, on a seed-shaped GRPO workload.

Reports in one run (JSON in ``--out``, default ``bench/results/packing.json``):

1. packing alone: train step, packed (block-sparse) vs the faster unpacked train step of block-sparse
   attention (skips all-padding blocks) and Tunix's dense attention, as % of the token-ratio limit
   (padded / real tokens);
2. whole actor side: reference + old-policy log-probs + train step (+ the packed arm's host work),
   packed vs what Tunix gives unpacked;
3. the same two on a model with Qwen3-0.6B's widths and ``--wide-layers`` layers, with a chunked
   vocabulary head (``--vocab-chunk`` tokens at a time) in every arm;
   ``real``: Qwen3-0.6B's real shape (``--real-layers`` 28 layers, all widths, vocabulary 151,936 tied,
   random weights) on prompt/completion lengths drawn like the v5e example's (``workload_gsm8k``);
   every model also runs ``packed-headc`` and ``tunix-headc`` (the head at completion columns only);
   the packed arms run the token stream as the learner does; ``--arms`` may add ``packed-rows`` and
   ``packed-rows-headc`` (the rows alone, as every run before 2026-12-05; figures ``*rows*``);
4. rows used vs rows computed; 5. data-parallel shard imbalance with and without balancing;
6. host seconds per step (planning, index building, transfers) as % of the packed actor side.

Arms are in ``bench/packing_arms.py``; each runs in its own process (peak RSS per arm). A run merges
its models into ``--out`` (other models' figures stay, each with its own date/load/command in ``runs``).

    JAX_PLATFORMS=cpu .venv/bin/python bench/packing.py
    JAX_PLATFORMS=cpu flock /tmp/rljob-heavy.lock .venv/bin/python bench/packing.py --models real
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT), str(ROOT / "bench")]

ARMS = ("tunix", "unpacked-blocked", "packed", "packed-headc", "tunix-headc")
# Run with --arms only; the rows-alone arms add the ``*rows*`` figures (``rows_figures``).
EXTRA_ARMS = ("packed-dense-headc", "packed-rows", "packed-rows-headc")


def machine() -> dict:
    mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1]
    return {
        "cpus": os.cpu_count(),
        "ram_gib": round(int(mem) / 2**20, 1),
        "cpu": platform.processor() or platform.machine(),
    }


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def shard_balance(a: argparse.Namespace, widths: tuple[int, ...] = (4, 8)) -> dict:
    """Max/mean estimated shard cost of the tiny workload's micro-batches, balanced vs planning order."""
    from packing_arms import workload
    from rljob_trainer.packing.rows import balance_rows, plan_rows, row_costs, shard_imbalance

    out = {}
    for w in widths:
        before, after = [], []
        for p, c in workload(a.row, a.batch, a.steps, a.seed):
            plan = plan_rows(np.add(p, c), a.row, multiple_of=w)
            costs = row_costs(plan, 1.0 / a.row)
            before.append(shard_imbalance(costs, w))
            new = balance_rows(costs, w)
            after.append(shard_imbalance(costs[np.argsort(new)], w))
        out[f"dp{w}"] = {"unbalanced_max": max(before), "balanced_max": max(after)}
    return out


def layer_params(dims: dict) -> int:
    """Matmul weights of one decoder layer: q, k, v, o projections + gated MLP (a token's FLOPs
    through the layer are twice this)."""
    d, h = dims["embed_dim"], dims["hidden_dim"]
    q, kv = dims["num_heads"] * dims["head_dim"], dims["num_kv_heads"] * dims["head_dim"]
    return d * (2 * q + 2 * kv) + 3 * d * h


def head_flop_share(dims: dict, layers: int) -> float:
    """The vocabulary head's share of a real token's matmul FLOPs (forward or backward alike): head
    ``D x V`` against the decoder's ``layers`` x ``layer_params``; attention scores (a few % at rows of
    256) left out."""
    d = dims["embed_dim"]
    return d * dims["vocab_size"] / (d * dims["vocab_size"] + layers * layer_params(dims))


def figures(res: dict, kind: str) -> dict:
    from packing_arms import WIDE

    t, ub, pk, pkh, th = (res[f"{kind}/{arm}"] for arm in ARMS)
    limit = pk["padded_tokens"] / pk["real_tokens"]
    # What the head no longer computes: Tunix's head sees every padded column, the packed-headc head
    # the completion tokens only.
    head_share = 1 - (pk["real_tokens"] - pk["prompt_tokens"]) / pk["padded_tokens"]
    # Packing alone: against the faster unpacked train step (block-sparse should be, but on the wide
    # model its gathers can cost more than the padding blocks it skips); both are reported.
    alone = min(ub["train_s"], t["train_s"]) / pk["train_s"]
    actor = t["actor_s"] / pk["actor_s"]
    # The actor-side goal with the head at completions: the token ratio, raised by the head's FLOPs on
    # the prompt tokens that packed-headc no longer computes (share h of a token's FLOPs, prompt share s
    # of the real tokens): limit / (1 - h s). Tiny model: no figure (its head is not chunked).
    h = head_flop_share(WIDE, pk["layers"]) if kind != "tiny" else None
    s = pk["prompt_tokens"] / pk["real_tokens"]
    goal = limit / (1 - h * s) if h is not None else None
    return {
        **rows_figures(res, kind, ub, limit),
        "token_ratio_limit": limit,
        "packing_alone_speedup": alone,
        "packing_alone_pct_of_limit": 100 * alone / limit,
        "packing_alone_vs_unpacked_blocked": ub["train_s"] / pk["train_s"],
        "actor_side_speedup": actor,
        "actor_side_pct_of_limit": 100 * actor / limit,
        "kernel_speedup_unpacked": t["train_s"] / ub["train_s"],
        "actor_side_speedup_packed_headc": t["actor_s"] / pkh["actor_s"],
        "actor_side_packed_headc_over_limit": t["actor_s"] / pkh["actor_s"] / limit,
        "head_at_completions_speedup_packed": pk["actor_s"] / pkh["actor_s"],
        "head_at_completions_speedup_tunix": t["actor_s"] / th["actor_s"],
        "head_at_completions_speedup_packed_train": pk["train_s"] / pkh["train_s"],
        "prompt_share_of_real_tokens": pk["prompt_tokens"] / pk["real_tokens"],
        "columns_off_the_head_vs_tunix": head_share,
        "head_flop_share": h,
        "actor_side_goal_packed_headc": goal,
        "actor_side_packed_headc_pct_of_goal": 100 * t["actor_s"] / pkh["actor_s"] / goal if goal else None,
        "peak_rss_mib": {arm: res[f"{kind}/{arm}"]["peak_rss_mib"] for arm in ARMS},
        "peak_packed_headc_over_tunix": pkh["peak_rss_mib"] / t["peak_rss_mib"],
        "rows_used_utilization": pk["real_tokens"] / (pk["rows_used"] * pk["row"]),
        "rows_computed_utilization": pk["real_tokens"] / (pk["rows"] * pk["row"]),
        "rows_used_per_step": pk["rows_used"] / pk["steps"],
        "rows_computed_per_step": pk["rows"] / pk["steps"],
        # The per-token layers' columns: the stream where one was planned, else the rows.
        "stream_tokens_per_step": pk["stream_tokens"] / pk["steps"],
        "host_pct_of_actor_step": 100 * pk["host_s"] / pk["actor_s"],
    }


def rows_figures(res: dict, kind: str, ub: dict, limit: float) -> dict:
    """The rows-alone arms (``packed-rows``, ``packed-rows-headc``, when run): packing without the token
    stream, against the same unpacked arm and against the packed arms (what the stream adds)."""
    out = {}
    rows, pk = res.get(f"{kind}/packed-rows"), res[f"{kind}/packed"]
    if rows is not None:
        out["packing_alone_rows_vs_unpacked_blocked"] = ub["train_s"] / rows["train_s"]
        out["packing_alone_rows_pct_of_limit"] = 100 * ub["train_s"] / rows["train_s"] / limit
        out["stream_speedup_train"] = rows["train_s"] / pk["train_s"]
    rows_h, pkh = res.get(f"{kind}/packed-rows-headc"), res[f"{kind}/packed-headc"]
    if rows_h is not None:
        out["actor_side_speedup_packed_rows_headc"] = res[f"{kind}/tunix"]["actor_s"] / rows_h["actor_s"]
        out["stream_speedup_headc_actor"] = rows_h["actor_s"] / pkh["actor_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", type=int, default=512, help="tiny model: row = max prompt + max completion")
    ap.add_argument("--batch", type=int, default=96, help="tiny model: sequences per micro-batch")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--wide-row", type=int, default=256)
    ap.add_argument("--wide-batch", type=int, default=8)
    ap.add_argument("--wide-steps", type=int, default=1)
    ap.add_argument("--wide-layers", type=int, default=2)
    ap.add_argument("--real-row", type=int, default=1024, help="real shape: row (v5e: 1,024)")
    ap.add_argument("--real-batch", type=int, default=8)
    ap.add_argument("--real-steps", type=int, default=1)
    ap.add_argument("--real-layers", type=int, default=28)
    ap.add_argument(
        "--arms",
        default=",".join(ARMS),
        help=f"arms to run (figures need the first five; extra: {', '.join(EXTRA_ARMS)})",
    )
    ap.add_argument("--vocab-chunk", type=int, default=256, help="tokens per chunk of the wide head")
    ap.add_argument("--block", type=int, default=128, help="block-sparse attention block")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", default="tiny,wide")
    ap.add_argument(
        "--no-tail",
        action="store_true",
        help="the last layer's MLP at every token (loss.TAIL_AT_COMPLETIONS off), for the tail's A/B",
    )
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "bench/results/packing.json"))
    a = ap.parse_args()
    if a.arm:
        from packing_arms import run_arm
        from rljob_trainer.packing import loss

        loss.TAIL_AT_COMPLETIONS = not a.no_tail

        kind, arm = a.arm.split("/")
        r = run_arm(arm, kind, a)
        r["row"] = {"tiny": a.row, "wide": a.wide_row, "real": a.real_row}[kind]
        print(json.dumps(r))
        return

    import jax

    started = time.time()
    kinds = a.models.split(",")
    old = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else {}
    run = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["JAX_PLATFORMS=cpu", Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "load_before": load(),
        "jax": jax.__version__,
        "args": {k: v for k, v in vars(a).items() if k != "arm"},
    }
    doc = {
        **old,
        **({} if {"tiny", "wide"} - set(kinds) else run),
        "shapes": {
            **old.get("shapes", {}),
            "tiny": "qwen3 2 layers, dim 64, MLP 128, 4 q / 2 kv heads x 16, vocab 256, fp32",
            "wide": f"qwen3 {a.wide_layers} layers, dim 1024, MLP 3072, 16 q / 8 kv heads x 128, "
            f"vocab 151936 (tied), fp32; head in chunks of {a.vocab_chunk} tokens",
            "real": f"qwen3 {a.real_layers} layers, Qwen3-0.6B widths (dim 1024, MLP 3072, 16 q / 8 kv "
            f"heads x 128, vocab 151936 tied), random weights, fp32; row {a.real_row}, {a.real_batch} "
            f"sequences x {a.real_steps} steps, GSM8K-like lengths (workload_gsm8k); head in chunks "
            f"of {a.vocab_chunk} tokens",
        },
        "arms": dict(old.get("arms", {})),
        "runs": dict(old.get("runs", {})),
    }
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    for kind in kinds:
        for arm in a.arms.split(","):
            cmd = [sys.executable, __file__, "--arm", f"{kind}/{arm}", *sys.argv[1:]]
            load0 = load()
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
            r = json.loads(out.strip().splitlines()[-1])
            r["load_before"], r["load_after"] = load0, load()
            doc["arms"][f"{kind}/{arm}"] = r
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")  # each arm as soon as it is done
            print(
                f"{kind}/{arm}: train {r['train_s']:.2f} s, actor side {r['actor_s']:.2f} s, load {r['load_after']}",
                file=sys.stderr,
                flush=True,
            )
        if all(f"{kind}/{arm}" in doc["arms"] for arm in ARMS):
            doc[kind] = figures(doc["arms"], kind)
            print(json.dumps({kind: doc[kind]}, indent=1), file=sys.stderr, flush=True)
        doc["runs"][kind] = {**run, "load_after": load(), "run_s": time.time() - started}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")  # each model as soon as it is done
    doc["shard_imbalance"] = shard_balance(a)
    if not {"tiny", "wide"} - set(kinds):
        doc["load_after"] = load()
        doc["run_s"] = time.time() - started
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: doc[k] for k in (*kinds, "shard_imbalance") if k in doc}, indent=1))


if __name__ == "__main__":
    main()
