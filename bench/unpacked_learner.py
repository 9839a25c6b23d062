"""Packing off: Tunix's ``GRPOLearner`` vs ``UnpackedGRPOLearner`` (head at completion columns only).

Both learners on one tiny-depth qwen3 (2 layers, dim 64, float32) with a real vocabulary (151,936 words,
tied: Qwen3's), so the head dominates as in the 2-layer wide model; Tunix's unpacked ``[B, P + Tc]``
layout, left-padded prompts and completions of drawn lengths. Per arm, in its own child process (so the
peak RSS is the arm's alone): the reference pass and the old-policy pass as Tunix's learner calls them
(``rl_cluster.get_*_per_token_logps``), and the train pass (the actor trainer's loss fn under
``jax.value_and_grad``, jitted, no optimizer). Seconds: first call (compile + run) and the median of
``--repeats`` calls after it.

    JAX_PLATFORMS=cpu PYTHONPATH=.:operator:trainer:cli .venv/bin/python bench/unpacked_learner.py
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
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def timed(fn: Any, repeats: int) -> dict[str, float]:
    import jax

    started = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - started
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        jax.block_until_ready(fn())
        runs.append(time.perf_counter() - started)
    return {"first_s": first, "median_s": float(np.median(runs))}


def child(a: argparse.Namespace) -> dict[str, Any]:
    import jax
    from flax import nnx
    from rljob_trainer.packing.testing import (
        EOS_ID,
        PAD_ID,
        grpo_config,
        length_reward,
        random_train_example,
        tiny_cluster,
    )
    from rljob_trainer.packing.unpacked import UnpackedGRPOLearner
    from tunix.rl.grpo.grpo_learner import GRPOLearner

    rng = np.random.default_rng(0)
    prompts = rng.integers(a.prompt // 2, a.prompt + 1, a.seqs).tolist()
    completions = rng.integers(a.completion // 4, a.completion + 1, a.seqs).tolist()
    cluster = tiny_cluster(
        "qwen3", max_prompt=a.prompt, max_completion=a.completion, beta=0.04, vocab_size=a.vocab
    )
    cls = {"tunix": GRPOLearner, "unpacked": UnpackedGRPOLearner}[a.arm]
    learner = cls(rl_cluster=cluster, algo_config=grpo_config(num_iterations=2), reward_fns=[length_reward])
    ex = random_train_example(prompts, completions, max_prompt=a.prompt, max_completion=a.completion, seed=1)
    loss_fn, cfg = cluster.actor_trainer.loss_fn, learner.algo_config

    @nnx.jit
    def train(model: Any) -> Any:
        return nnx.value_and_grad(lambda m: loss_fn(m, train_example=ex, algo_config=cfg), has_aux=True)(
            model
        )

    model = cluster.actor_trainer.model
    out = {
        "reference": timed(
            lambda: cluster.get_ref_per_token_logps(ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID),
            a.repeats,
        ),
        "old_policy": timed(
            lambda: cluster.get_old_per_token_logps(ex.prompt_ids, ex.completion_ids), a.repeats
        ),
        "train": timed(lambda: train(model), a.repeats),
        "real_prompt_tokens": int(sum(prompts)),
        "real_completion_tokens": int(sum(completions)),
        "jax": jax.__version__,
    }
    with open("/proc/self/status") as f:
        hwm = next(line for line in f if line.startswith("VmHWM"))
    out["peak_rss_gib"] = int(hwm.split()[1]) / 2**20
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--prompt", type=int, default=96, help="max prompt tokens (columns)")
    ap.add_argument("--completion", type=int, default=160, help="max completion tokens (columns)")
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "bench/results/unpacked_learner.json"))
    a = ap.parse_args()
    if a.arm:
        print(json.dumps(child(a)))
        return
    arms = {}
    load0 = os.getloadavg()
    for arm in ("tunix", "unpacked"):
        sizes = [f"--{k}={getattr(a, k)}" for k in ("vocab", "prompt", "completion", "seqs", "repeats")]
        cmd = [sys.executable, __file__, "--arm", arm, *sizes]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        arms[arm] = json.loads(done.stdout.strip().splitlines()[-1])
        print(arm, json.dumps(arms[arm]), flush=True)
    t, u = arms["tunix"], arms["unpacked"]
    doc = {
        "what": __doc__.splitlines()[0],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared), CPU JAX {t['jax']}",
        "load_before": load0,
        "load_after": os.getloadavg(),
        "shape": {k: getattr(a, k) for k in ("vocab", "prompt", "completion", "seqs")},
        "arms": arms,
        "speedup_median": {
            p: t[p]["median_s"] / u[p]["median_s"] for p in ("reference", "old_policy", "train")
        },
    }
    Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["speedup_median"]))


if __name__ == "__main__":
    main()
