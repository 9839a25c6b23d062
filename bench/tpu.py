"""The TPU benchmark: Qwen3-0.6B at its real shape, one arm per call, as the trainer runs it.

    python bench/tpu.py --arm packed --out OUT/packed.json [--prompts 16 --generations 8 --prompt 384
        --total 1024 --row 8192 --mini 8 --steps 3 --budget N]

The job is the v5e example's per-step batch by default (16 prompts x 8 generations, prompt 384 / total
1,024, mini-batch 8, rows of 8,192): random bf16 weights with EOS rows scaled so completions end at varied
lengths (``memory_job.write_checkpoint(eos_scale=7.5)``), the real Qwen3 tokenizer (``.tpu/qwen3-tokenizer``
or ``$RLJOB_QWEN3_TOKENIZER``), GSM8K-format data, mathAnswer + regex rewards, beta 0.04. It trains in this
process through ``run.main.train`` (what a pod runs, minus the metrics server) and writes, per step:
seconds by phase, real tokens, tokens/s per chip, MFU of the train phase and of the whole step against
v5e's 197 bf16 TFLOP/s (model FLOPs of real tokens, ``telemetry.flops``), and the chip's memory at each
phase's end (in use, the runtime's peak so far). Plus the token budget and rollout chunks chosen from free
HBM, the date, commit, chip and versions. Arms: ``packed`` (rows of ``--row``), ``unpacked`` (packing
off: the project's unpacked learner), ``tunix`` (packing off: Tunix's own GRPOLearner, as
``tests/trainer/test_run_grpo.py`` swaps it in). ``--profile train@2`` adds where step 2's train phase
spent its device time (``bench/phase_profile.py``). Results of record go to bench/results/tpu.json (by hand, with the
call's command), quoted in docs/tpu.md.

Dry-run on CPU (``JAX_PLATFORMS=cpu``, e.g. ``--prompts 2 --generations 4 --prompt 128 --total 160 --row 256
--mini 1 --budget 256``: a few minutes) before spending chip time: same code, no MFU (no TPU peak).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import faulthandler
import json
import logging
import os
import pstats
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import memory_job  # noqa: E402  (bench/, on the path above)
from phase_profile import PhaseProfile, summarize  # noqa: E402  (bench/phase_profile.py)

V5E_PEAK = 197e12  # bf16 FLOP/s of one v5e chip (rljob/api/tpu.py)
ACTOR = ("reference", "old_logps", "train")  # the actor-side passes (the rollout is the sampler's)


def args_of(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arm", choices=("packed", "unpacked", "tunix"), required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--prompt", type=int, default=384)
    p.add_argument("--total", type=int, default=1024)
    p.add_argument("--row", type=int, default=8192)
    p.add_argument("--mini", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--budget", type=int, default=None, help="spec.grpo.maxTokensPerTpu (unset: from HBM)")
    p.add_argument("--work", type=Path, default=Path(os.environ.get("RLJOB_TPU_CACHE", "/tmp/rljob-tpu")))
    p.add_argument(
        "--profile",
        action="append",
        default=[],
        help="PHASE@STEP[:SECONDS]: trace that phase (bench/phase_profile.py), e.g. train@2; repeatable",
    )
    p.add_argument(
        "--tunix-decode",
        action="store_true",
        help="the sampler's decode compiled as Tunix does (without decode.DECODE_COMPILER_OPTIONS): an A/B arm",
    )
    p.add_argument(
        "--default-kv-layout",
        action="store_true",
        help="the sampler's caches in Tunix's layout (decode.KV_LAYOUT None): an A/B arm",
    )
    p.add_argument(
        "--unrolled-layers",
        action="store_true",
        help="the packed passes' decoder layers unrolled, one copy per layer (stack.SCAN_LAYERS False; a "
        "TPU scans them by default since 2026-12-06 23:00): an A/B arm",
    )
    p.add_argument(
        "--save-dots",
        choices=("mlp", "all", "everything"),
        default=None,
        help="the scanned layers keep these matmul outputs for the backward instead of recomputing them "
        "(stack.SAVE_DOTS; default: none kept, every layer recomputed whole): an A/B arm",
    )
    p.add_argument(
        "--no-prewarm",
        action="store_true",
        help="packed arm: the train step compiled by step 1's train call, not beside the first rollout "
        "(packing.prewarm.ENABLED False; on by default since 2026-12-07 03:00): an A/B arm",
    )
    p.add_argument(
        "--decode-segments",
        type=int,
        default=None,
        help="pieces of the decode loop (decode.SEGMENTS; 1: one loop over the whole cache, as Tunix's)",
    )
    p.add_argument(
        "--int8-kv-cache",
        action="store_true",
        help="the sampler's KV cache in int8 with a scale per position and head (decode.INT8_CACHE; "
        "changes the sampled tokens)",
    )
    p.add_argument(
        "--unbounded-decode",
        action="store_true",
        help="decode steps attend the whole cache with Tunix's einsum (decode.BOUNDED False; the filled "
        "positions only, in blocks, by default since 2026-12-07; before, --bounded-decode asked for that): "
        "an A/B arm",
    )
    p.add_argument(
        "--decode-block",
        type=int,
        default=None,
        help="positions a decode attention block (decode_attention.BLOCK; at most, see block_size)",
    )
    p.add_argument(
        "--rollout-share",
        type=float,
        default=None,
        help="share of free HBM a sampler call may take at its peak (memory.ROLLOUT_SHARE; more: fewer calls)",
    )
    p.add_argument(
        "--decode-temporaries",
        type=float,
        default=None,
        help="the decode program's temporaries the rollout plans for, in KV caches of a call, in either "
        "cache layout (memory.KV_LAYOUT_TEMPORARY_CACHES 0.1, memory.DECODE_TEMPORARY_CACHES 1.0)",
    )
    p.add_argument(
        "--vocab-chunk",
        type=int,
        default=None,
        help="packed arm: tokens per vocabulary-head chunk (head.auto_vocab_chunk: 1,024 with splash; 256 "
        "before 2026-12-06 20:00); fewer, larger chunks "
        "add the head's float32 [V, D] weight gradient fewer times (an A/B arm)",
    )
    p.add_argument(
        "--splash-block",
        type=int,
        default=None,
        help="packed arm: splash's query and key block (splash.splash_block: the first of 512/256/128 dividing "
        "the row); a smaller one skips more of a window's masked positions (an A/B arm)",
    )
    p.add_argument(
        "--cprofile",
        type=Path,
        default=None,
        help="write the host's Python profile (cProfile, by cumulative time) here: where a start's seconds go",
    )
    p.add_argument(
        "--stacks", type=float, default=0, help="print every thread's stack when a phase runs this long"
    )
    return p.parse_args(argv)


def job(a: argparse.Namespace) -> dict:
    tok = Path(os.environ.get("RLJOB_QWEN3_TOKENIZER", ROOT / ".tpu" / "qwen3-tokenizer"))
    ckpt = memory_job.write_checkpoint(a.work / "qwen3-0.6b", 28, tok, eos_scale=7.5)
    data = memory_job.write_gsm8k(a.work / "gsm8k.parquet")
    doc = memory_job.manifest(
        ckpt,
        data,
        rewards=["mathAnswer", "regex"],
        prompt=a.prompt,
        total=a.total,
        row=a.row if a.arm == "packed" else 0,
        batch=a.prompts,
        generations=a.generations,
        steps=a.steps,
        beta=0.04,
    )
    doc["metadata"]["name"] = f"tpu-bench-{a.arm}"
    doc["spec"]["metrics"] = {"port": 9464}  # not served: RLJOB_NO_SOCKETS on the chip
    doc["spec"]["grpo"]["miniBatchSize"] = a.mini
    if a.budget:
        doc["spec"]["grpo"]["maxTokensPerTpu"] = a.budget
    return doc


class ProgramCounter:
    """XLA programs each step got: compiled by the backend, or read from the persistent cache, and the host
    seconds spent tracing, lowering, compiling and reading the cache, by thread (JAX's monitoring events
    come from the thread that does the work: Tunix's main thread trains, another rolls out; the prewarm's
    is ``rljob-prewarm``). Issue 42's goal: nothing compiled after step 3 of a 20-step run."""

    SECONDS = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "compile",
        "/jax/compilation_cache/cache_retrieval_time_sec": "cache_load",
    }

    def __init__(self) -> None:
        import jax.monitoring

        self._lock = threading.Lock()
        self.now: dict[str, float] = {"compiled": 0, "cache_loads": 0}
        self._at_last_step: dict[str, float] = {}
        self.by_step: dict[int, dict] = {}
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        jax.monitoring.register_event_listener(self._event)

    def _add(self, key: str, value: float) -> None:
        with self._lock:
            self.now[key] = self.now.get(key, 0.0) + value

    def _duration(self, event: str, seconds: float, **_) -> None:
        kind = self.SECONDS.get(event)
        if kind is not None:
            self._add(f"{kind}_seconds {threading.current_thread().name}", seconds)
        if kind == "compile":
            self._add("compiled", 1)

    def _event(self, event: str, **_) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self._add("cache_loads", 1)

    def __call__(self, r) -> None:
        """The StepCallback: the programs and host seconds since the last step ended."""
        with self._lock:
            now, before, self._at_last_step = dict(self.now), self._at_last_step, dict(self.now)
        self.by_step[r.step] = {k: round(v - before.get(k, 0), 2) for k, v in now.items()}


def step_record(r, step_flops, programs: dict | None = None) -> dict:
    """One StepReport as figures: phases, tokens, MFU (train phase, actor side, whole step), HBM per phase (GiB)."""
    by_phase = step_flops.by_phase(r.phase_seconds, r.real_tokens)
    train_s = r.phase_seconds.get("train", 0.0)
    actor_s = sum(r.phase_seconds.get(p, 0.0) for p in ACTOR)
    gib = 2**30
    return {
        "step": r.step,
        "seconds": round(r.seconds, 3),
        "phases": {k: round(v, 3) for k, v in r.phase_seconds.items()},
        "real_tokens": r.real_tokens,
        "slot_tokens": r.slot_tokens,
        "tokens_per_s_per_chip": round(r.real_tokens / r.seconds / step_flops.chips, 1),
        "generated_tokens": r.generated_tokens,
        "rollout_tokens_per_s": round(r.rollout_tokens_per_second or 0.0, 1),
        "sampler_seconds": {k: round(v, 3) for k, v in r.sampler_seconds.items()},
        "decode_iterations": r.decode_steps,
        "decode_ms_per_iteration": round(1e3 * r.decode_seconds_per_step, 2) if r.decode_steps else None,
        "mfu_train": step_flops.mfu(by_phase.get("train", 0), train_s) if train_s else None,
        # the actor side: reference, old-policy and train passes, FLOPs over their seconds together
        "mfu_actor": step_flops.mfu(sum(by_phase.get(p, 0) for p in ACTOR), actor_s) if actor_s else None,
        "mfu_step": step_flops.mfu(sum(by_phase.values()), r.seconds),
        "hbm_gib": {k: [round(v[0] / gib, 2), round(v[1] / gib, 2)] for k, v in r.phase_hbm.items()},
        "reward_mean": round(float(r.rewards.mean()), 4) if r.rewards.size else None,
        "programs": programs,
    }


def _trace_phases(profiles: list[PhaseProfile], stacks: float = 0) -> None:
    """Print each phase's end as it happens (time, seconds, HBM), so a call cut off by the device's
    time limit still says where its time went; each of ``profiles`` traces the phase it names."""
    import contextlib

    from rljob_trainer.telemetry.progress import StepRecorder

    phase = StepRecorder.phase

    @contextlib.contextmanager
    def traced(self, name):
        t0 = time.perf_counter()
        with phase(self, name):
            for profile in profiles:
                profile.begin(name)
            if stacks:  # where the host spends a long phase (faulthandler: every thread's Python stack)
                faulthandler.dump_traceback_later(stacks, repeat=True, file=sys.stdout)
            try:
                yield
            finally:
                if stacks:
                    faulthandler.cancel_dump_traceback_later()
                for profile in profiles:
                    profile.end(name)
        usage = self.memory_probe() if self.memory_probe else None
        hbm = f" hbm in use {usage[0] / 2**30:.2f} GiB, peak {usage[1] / 2**30:.2f} GiB" if usage else ""
        print(f"{time.strftime('%H:%M:%S')} phase {name} {time.perf_counter() - t0:.1f}s{hbm}", flush=True)

    StepRecorder.phase = traced


def _packed_overrides(vocab_chunk: int | None, block: int | None) -> None:
    """The packed learner built with ``vocab_chunk`` tokens per head chunk and splash blocks of ``block``
    (None: the trainer's own choice), for the A/B arms ``--vocab-chunk`` and ``--splash-block``."""
    from rljob_trainer import tunix_bridge
    from rljob_trainer.packing import learner

    if block is not None:
        learner.splash_block = lambda row_len: block
    if vocab_chunk is not None:
        pick = tunix_bridge.learner_class

        def with_chunk(*args, **kwargs):
            base, extra = pick(*args, **kwargs)
            return base, ({**extra, "vocab_chunk": vocab_chunk} if "row_tokens" in extra else extra)

        tunix_bridge.learner_class = with_chunk


def main(argv: list[str] | None = None) -> int:
    a = args_of(argv)
    import jax
    from rljob_trainer import decode, decode_attention, memory
    from rljob_trainer.packing import prewarm, stack
    from rljob_trainer.run import compile_cache
    from rljob_trainer.run import main as trainer_main
    from rljob_trainer.telemetry import flops
    from rljob_trainer.telemetry.progress import ConsoleProgress

    from rljob.api import parse_rljob
    from tests.tpu.chip import versions

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("rljob_trainer").setLevel(logging.INFO)  # the budget and rollout chunks chosen
    compile_cache.enable(str(a.work / "compilation-cache"))  # as a pod: a second call starts warm
    profiles = [PhaseProfile(spec, a.out.parent / f"{a.arm}-trace-{i}") for i, spec in enumerate(a.profile)]
    _trace_phases(profiles, a.stacks)
    if a.tunix_decode:
        decode.DECODE_COMPILER_OPTIONS = {}
    if a.default_kv_layout:
        decode.KV_LAYOUT = None
    if a.unrolled_layers:
        stack.SCAN_LAYERS = False
    if a.save_dots is not None:
        stack.SAVE_DOTS = a.save_dots
    if a.no_prewarm:
        prewarm.ENABLED = False
    if a.decode_segments is not None:
        decode.SEGMENTS = a.decode_segments
    if a.unbounded_decode:
        decode.BOUNDED = False
    decode.INT8_CACHE = a.int8_kv_cache
    if a.decode_block is not None:
        decode_attention.BLOCK = a.decode_block
    if a.rollout_share is not None:
        memory.ROLLOUT_SHARE = a.rollout_share
    if a.decode_temporaries is not None:
        memory.DECODE_TEMPORARY_CACHES = memory.KV_LAYOUT_TEMPORARY_CACHES = a.decode_temporaries
    if a.vocab_chunk is not None or a.splash_block is not None:
        _packed_overrides(a.vocab_chunk, a.splash_block)
    if a.arm == "tunix":
        from rljob_trainer import tunix_bridge
        from tunix.rl.grpo.grpo_learner import GRPOLearner

        tunix_bridge.unpacked_learner = lambda spec: (GRPOLearner, {})
    started = time.time()
    doc = job(a)
    profiler = cProfile.Profile() if a.cprofile else None
    if profiler:
        profiler.enable()
    programs = ProgramCounter()
    run = trainer_main.train(parse_rljob(doc), callbacks=[ConsoleProgress(stream=sys.stdout), programs])
    if profiler:
        profiler.disable()
        a.cprofile.parent.mkdir(parents=True, exist_ok=True)
        with a.cprofile.open("w") as f:
            pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(120)
    model = run.cluster.actor_trainer.model
    peak = V5E_PEAK if jax.default_backend() == "tpu" else None
    sf = flops.step_flops(model.config, a.total, 1, jax.device_count(), peak)
    learner = run.learner
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    stats = jax.local_devices()[0].memory_stats() or {}
    out = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        # the device's copy of the checkout may carry an older .git: the caller's RLJOB_COMMIT wins
        "commit": os.environ.get("RLJOB_COMMIT") or commit.stdout.strip() or "?",
        "device": str(jax.devices()[0].device_kind),
        "backend": jax.default_backend(),
        "versions": versions(),
        "command": "python bench/tpu.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "arm": a.arm,
        "shape": {k: getattr(a, k) for k in ("prompts", "generations", "prompt", "total", "row", "mini")},
        "hbm_limit_gib": round(stats.get("bytes_limit", 0) / 2**30, 2),
        "token_budget_rows": getattr(learner, "chunk_rows", None),
        "token_budget_sequences": getattr(learner, "per_chunk", None),
        "rollout_prompts_per_call": run.cluster.cluster_config.training_config.rollout_micro_batch_size,
        "budget_share": memory.BUDGET_SHARE,
        "rollout_share": memory.ROLLOUT_SHARE,
        "decode_temporary_caches": memory.KV_LAYOUT_TEMPORARY_CACHES
        if decode.KV_LAYOUT
        else memory.DECODE_TEMPORARY_CACHES,
        "decode_compiler_options": decode.DECODE_COMPILER_OPTIONS,
        "decode_segments": decode.SEGMENTS,
        "bounded_decode_block": decode_attention.BLOCK if decode.BOUNDED else None,
        "int8_kv_cache": decode.INT8_CACHE,
        "scan_layers": stack.scans(),
        "save_dots": stack.SAVE_DOTS,
        "prewarm": prewarm.ENABLED,
        "prewarm_seconds": getattr(getattr(learner, "prewarm", None), "seconds", None),
        "kv_layout": None if decode.KV_LAYOUT is None else list(decode.KV_LAYOUT.major_to_minor),
        "vocab_chunk": getattr(learner, "vocab_chunk", None),
        "attention_block": getattr(learner, "attention_block", None),
        "wall_seconds": round(time.time() - started, 1),
        "steps": [step_record(r, sf, programs.by_step.get(r.step)) for r in run.recorder.reports],
    }
    out["profiles"] = [
        {"phase": spec, **summarize(p.out)} for spec, p in zip(a.profile, profiles, strict=True)
    ]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    for step, got in sorted(programs.by_step.items()):  # one line each, for bench.sh's summary
        host = ", ".join(f"{k} {v:.1f}" for k, v in sorted(got.items()) if "_seconds " in k and v >= 0.05)
        print(
            f"programs step {step}: {got['compiled']:.0f} compiled, {got['cache_loads']:.0f} from the cache; {host}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
