"""One arm of the packing benchmark (run in its own process by ``bench/packing.py``).

Arms, all on identical pre-generated micro-batches and the same random weights (fp32):

* ``tunix``: what Tunix gives unpacked. Tiny model: Tunix's own ``grpo_loss_fn`` train step and
  ``common.compute_per_token_logps`` for the reference and old-policy passes (``[B, P + Tc]``, Tunix's
  dense masked attention). Wide model: Tunix's layout and Tunix's attention algorithm (dense ``[L, L]``
  masked scores, ``attention.dense_attention``) through the project's forward, with the same chunked
  vocabulary head as the packed arm (Tunix's own call would materialise ``[B, L, V]`` logits: 5 GB+).
* ``unpacked-blocked``: Tunix's unpacked ``[B, L]`` layout (one sequence per row, left-padded prompt)
  with the block-sparse attention that skips all-padding blocks: the best kernel the project has, so
  ``packed`` vs this is packing alone. Train step only.
* ``packed``: best-fit-decreasing rows, block-sparse attention, one plan per micro-batch shared by the
  reference pass, the old-policy pass and the train step, with the token stream (``rows.token_stream``:
  the per-token layers on the real tokens only, rounded up to a row; attention on the rows) wherever it
  skips a row, as ``PackedGRPOLearner`` runs them (``learner.stream``).
* ``packed-headc``: ``packed`` with the vocabulary head at completion columns only
  (``head.completion_head_logps``, the trainer's default): the learner's configuration, so the head's
  gain is seen alone.
* ``tunix-headc``: Tunix's unpacked layout and dense attention through the project's forward, head at
  completion columns only (what ``logps.unpacked_completion_logps`` runs).
* ``packed-rows``, ``packed-rows-headc`` (extra, figures ``*rows*``): ``packed`` / ``packed-headc`` on
  the rows alone (no token stream: the rows' padding columns run every layer), the packed arms' layout
  in every run before 2026-12-05.
* ``packed-dense-headc`` (extra, not in the figures): ``packed-headc`` with dense segment-causal
  attention over each packed row instead of block-sparse (``attention="dense"``): its speed and memory
  at short rows, where the block-sparse kernel's temporaries exceed Tunix's.

``tunix``, ``unpacked-blocked``, ``packed`` and ``packed-rows`` run the head over every column of their
layout (``head_at="rows"``), as before the head-at-completions change.

Each jitted function is compiled ahead of time (``lower().compile()``), so timed steps run no compile.
"""

from __future__ import annotations

import resource
import time
from typing import Any

import numpy as np

WIDE = {  # Qwen3-0.6B's widths (tied embedding, as Qwen3-0.6B); layers come from the command line
    "embed_dim": 1024,
    "hidden_dim": 3072,
    "num_heads": 16,
    "num_kv_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "rope_theta": 1_000_000,
    "use_tied_embedding": True,
}


def workload_gsm8k(row: int, batch: int, steps: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """Per step: (prompt lengths, completion lengths) drawn like the v5e example's (rljob-v5e.yaml: row
    1,024 = prompts up to 384 + completions up to 640), scaled to ``row``: GSM8K-like prompts (question
    + chat template, ~150 of 1,024 tokens, normal, sd 40), completions gamma-distributed (mean ~40% of
    the completion limit) and clipped at the limit, one completion exactly at the limit."""
    rng = np.random.default_rng(seed)
    max_p = round(0.375 * row)
    max_c = row - max_p
    out = []
    for _ in range(steps):
        p = np.clip(rng.normal(0.146 * row, 0.039 * row, batch).astype(int), max(1, round(0.05 * row)), max_p)
        c = np.clip(rng.gamma(2.0, 0.2 * max_c, batch).astype(int), 8, max_c)
        c[int(rng.integers(batch))] = max_c
        out.append((p.tolist(), c.tolist()))
    return out


def real_micro_batch(i: int, row: int = 256, batch: int = 48, steps: int = 3, seed: int = 0) -> Any:
    """Micro-batch ``i`` of the real-shape run as ``run_arm`` builds it (defaults: the run of record's
    ``--real-row 256 --real-batch 48 --real-steps 3``), for the scripts that look into one of them."""
    from rljob_trainer.packing.testing import random_train_example

    p, c = workload_gsm8k(row, batch, steps, seed)[i]
    max_p = round(0.375 * row)
    return random_train_example(p, c, max_prompt=max_p, max_completion=row - max_p, seed=i)


def learner_layout(ex: Any, row: int, block: int | None, shapes: Any, stream: bool = True) -> Any:
    """``plan_layout`` of one micro-batch as ``PackedGRPOLearner`` plans it (the token stream wherever
    it skips a row; block pairs only for the block-sparse kernel, ``block`` None for dense)."""
    from rljob_trainer.packing.example import plan_layout
    from rljob_trainer.packing.testing import PAD_ID

    p, c = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
    return plan_layout(
        p,
        p != PAD_ID,
        c,
        c != PAD_ID,
        row,
        pad_id=PAD_ID,
        attention_block=block,
        shapes=shapes,
        stream=stream,
    )


def step_fns(
    graphdef: Any, cfg: Any, *, attention: str, block: int, chunk: int, head_at: str
) -> tuple[Any, Any]:
    """``(train, logps)`` of the packed path, both ``f(state, inputs)``: the train step (``value_and_grad``
    of the packed GRPO loss, gradients returned) and the forward log-prob pass the reference and
    old-policy passes run; for the scripts that time or profile one of them."""
    import jax
    from flax import nnx
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn, packed_per_token_logps

    loss = make_packed_grpo_loss_fn(attention=attention, block=block, vocab_chunk=chunk, head_at=head_at)

    def train(st: Any, x: Any) -> Any:
        return jax.value_and_grad(lambda s: loss(nnx.merge(graphdef, s), x, cfg), has_aux=True)(st)

    def logps(st: Any, x: Any) -> Any:
        kw = {"attention": attention, "block": block, "vocab_chunk": chunk, "head_at": head_at}
        return packed_per_token_logps(
            nnx.merge(graphdef, st), x, temperature=cfg.temperature, entropy=False, **kw
        )[0]

    return train, logps


def workload(row: int, batch: int, steps: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """Per step: (prompt lengths, completion lengths), seed-shaped: prompts ~0.9-1.5% of the row,
    completions gamma-distributed with mean ~36% of the row, one sequence exactly a row long."""
    rng = np.random.default_rng(seed)
    max_p = max(2, round(0.015 * row))
    max_c = row - max_p
    out = []
    for _ in range(steps):
        p = rng.integers(max(1, round(0.009 * row)), max_p + 1, batch)
        c = np.clip(rng.gamma(2.0, 0.18 * row, batch).astype(int), 1, max_c)
        i = int(rng.integers(batch))
        p[i], c[i] = max_p, max_c
        out.append((p.tolist(), c.tolist()))
    return out


def unpacked_rows(ex: Any, block: int | None) -> Any:
    """Tunix's unpacked ``[B, P + Tc]`` layout as ``PackedTrainExample`` (one sequence per row)."""
    import jax.numpy as jnp
    from rljob_trainer.packing.attention import block_pairs
    from rljob_trainer.packing.example import PackedTrainExample

    p, c = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
    mask = np.concatenate([np.asarray(ex.prompt_mask), np.asarray(ex.completion_mask)], 1).astype(bool)
    B, P = p.shape
    L = P + c.shape[1]
    seg = mask.astype(np.int32)  # real tokens are contiguous: left-padded prompt, right-padded completion
    positions = np.maximum(np.cumsum(mask, 1) - 1, 0).astype(np.int32)  # build_positions_from_mask
    cols = np.arange(c.shape[1])[None]
    c_mask = np.asarray(ex.completion_mask).astype(bool)
    index = np.where(c_mask, np.arange(B)[:, None] * L + P + cols, 0).astype(np.int32)
    pairs = {}
    if block:
        bp = block_pairs(seg, block)
        pairs = {"pair_row": bp.row, "pair_q": bp.q, "pair_k": bp.k, "pair_valid": bp.valid}
    return PackedTrainExample(
        tokens=jnp.asarray(np.concatenate([p, c], 1)),
        positions=jnp.asarray(positions),
        segment_ids=jnp.asarray(seg),
        completion_index=jnp.asarray(index),
        completion_mask=jnp.asarray(ex.completion_mask),
        advantages=jnp.asarray(ex.advantages),
        ref_per_token_logps=ex.ref_per_token_logps,
        old_per_token_logps=ex.old_per_token_logps,
        kv_segment_ids=jnp.asarray(seg),
        **{k: jnp.asarray(v) for k, v in pairs.items()},
    )


def run_arm(arm: str, model_kind: str, a: Any) -> dict:
    import jax
    from flax import nnx
    from rljob_trainer.packing.example import pack_train_example
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn, packed_per_token_logps
    from rljob_trainer.packing.rows import ShapeCache
    from rljob_trainer.packing.testing import EOS_ID, PAD_ID, grpo_config, random_train_example, tiny_model
    from tunix.rl import common
    from tunix.rl.algo_core import grpo_loss_fn

    wide = model_kind in ("wide", "real")
    row, batch, steps, layers = {
        "tiny": (a.row, a.batch, a.steps, 2),
        "wide": (a.wide_row, a.wide_batch, a.wide_steps, a.wide_layers),
        "real": (a.real_row, a.real_batch, a.real_steps, a.real_layers),
    }[model_kind]
    chunk = a.vocab_chunk if wide else 0
    if model_kind == "real":
        lens, max_p = workload_gsm8k(row, batch, steps, a.seed), round(0.375 * row)
    else:
        lens, max_p = workload(row, batch, steps, a.seed), max(2, round(0.015 * row))
    overrides = {**WIDE, "num_layers": layers} if wide else {}
    model = tiny_model("qwen3", seed=0, **overrides)
    graphdef, state = nnx.split(model)
    cfg = grpo_config()
    examples = [
        random_train_example(p, c, max_prompt=max_p, max_completion=row - max_p, seed=i)
        for i, (p, c) in enumerate(lens)
    ]
    real = sum(int(np.asarray(e.prompt_mask).sum() + np.asarray(e.completion_mask).sum()) for e in examples)
    padded = sum(int(e.prompt_ids.size + e.completion_ids.size) for e in examples)

    dense_arms = ("tunix", "tunix-headc", "packed-dense-headc")
    attention = "dense" if arm in dense_arms else "blocked"
    head_at = "completions" if arm.endswith("-headc") else "rows"
    if arm == "tunix" and not wide:

        def loss(m: Any, ex: Any) -> Any:
            return grpo_loss_fn(m, ex, cfg, pad_id=PAD_ID, eos_id=EOS_ID)

        def logps(st: Any, ex: Any) -> Any:
            return common.compute_per_token_logps(
                graphdef, st, ex.prompt_ids, ex.completion_ids, PAD_ID, EOS_ID, temperature=cfg.temperature
            )
    else:
        packed_loss = make_packed_grpo_loss_fn(
            attention=attention, block=a.block, vocab_chunk=chunk, head_at=head_at
        )

        def loss(m: Any, ex: Any) -> Any:
            return packed_loss(m, ex, cfg)

        def logps(st: Any, ex: Any) -> Any:
            out, _ = packed_per_token_logps(
                nnx.merge(graphdef, st),
                ex,
                temperature=cfg.temperature,
                attention=attention,
                block=a.block,
                entropy=False,
                vocab_chunk=chunk,
                head_at=head_at,
            )
            return jax.lax.stop_gradient(out)

    def train(st: Any, ex: Any) -> Any:
        # Tunix's _train_step: value_and_grad of the loss (+ an optimizer update; the gradients are
        # returned instead, so nothing is optimised away and the weights stay fixed across steps).
        (value, _), grads = jax.value_and_grad(lambda s: loss(nnx.merge(graphdef, s), ex), has_aux=True)(st)
        return value, grads

    nb = row // a.block
    cache = ShapeCache(max_pairs_per_row=nb * (nb + 1) // 2)

    def prepare(ex: Any) -> tuple[Any, dict]:
        """Host side of one micro-batch: (inputs, seconds of planning + index building, transfer)."""
        if arm == "tunix" and not wide:
            return ex, {}
        if not arm.startswith("packed"):
            return unpacked_rows(ex, a.block if attention == "blocked" else None), {}
        t0 = time.perf_counter()
        # as the learner: the stream wherever it skips a row
        layout = learner_layout(ex, row, a.block, cache, stream="-rows" not in arm)
        t1 = time.perf_counter()
        pex, plan = pack_train_example(ex, row, pad_id=PAD_ID, layout=layout)
        jax.block_until_ready(pex)
        t2 = time.perf_counter()
        stream = layout.stream[0].size if layout.stream is not None else 0
        return pex, {
            "plan_s": t1 - t0,
            "transfer_s": t2 - t1,
            "plan": plan,
            "pairs": layout.pairs.count,
            "stream": stream,
        }

    # Ahead of time: every distinct input shape compiled once (no warm-up execution).
    train_jit, logps_jit = jax.jit(train), jax.jit(logps)
    compiled: dict[Any, tuple[Any, Any]] = {}
    t0 = time.perf_counter()
    for ex in examples:
        inp, _ = prepare(ex)
        key = tuple((x.shape, x.dtype) for x in jax.tree.leaves(inp))
        if key not in compiled:
            fwd = logps_jit.lower(state, inp).compile() if arm != "unpacked-blocked" else None
            compiled[key] = (train_jit.lower(state, inp).compile(), fwd)
    compile_s = time.perf_counter() - t0

    rec: dict[str, list[float]] = {k: [] for k in ("plan_s", "transfer_s", "ref_s", "old_s", "train_s")}
    rec["cpu_s"] = []
    stats = {"rows_used": 0, "rows": 0, "pairs": 0, "stream_tokens": 0}
    for ex in examples:
        c0 = time.process_time()
        inp, host = prepare(ex)
        train_c, fwd_c = compiled[tuple((x.shape, x.dtype) for x in jax.tree.leaves(inp))]
        for name in ("ref_s", "old_s") if fwd_c is not None else ():
            t = time.perf_counter()
            jax.block_until_ready(fwd_c(state, inp))
            rec[name].append(time.perf_counter() - t)
        t = time.perf_counter()
        jax.block_until_ready(train_c(state, inp))
        rec["train_s"].append(time.perf_counter() - t)
        rec["cpu_s"].append(time.process_time() - c0)
        for k in ("plan_s", "transfer_s"):
            rec[k].append(host.get(k, 0.0))
        if "plan" in host:
            stats["rows_used"] += host["plan"].rows_used
            stats["rows"] += host["plan"].num_rows
            stats["pairs"] += host["pairs"]
            stats["stream_tokens"] += host["stream"]
    out = {k: float(np.mean(v)) if v else 0.0 for k, v in rec.items()}
    out["host_s"] = out["plan_s"] + out["transfer_s"]
    out["actor_s"] = out["host_s"] + out["ref_s"] + out["old_s"] + out["train_s"]
    return {
        "arm": arm,
        "model": model_kind,
        "attention": attention,
        "vocab_chunk": chunk,
        "head_at": head_at,
        "layers": layers,
        "batch": batch,
        "steps": steps,
        "train_s_each": rec["train_s"],
        **out,
        "compile_s": compile_s,
        "shapes": len(compiled),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "real_tokens": real,
        "prompt_tokens": sum(int(np.asarray(e.prompt_mask).sum()) for e in examples),
        "padded_tokens": padded,
        **stats,
    }
