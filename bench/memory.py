"""Memory benchmark: the v5e example's model (Qwen3-0.6B shapes) trained by GRPO on this machine.

One RLJob (``memory_job.manifest``: Qwen3-0.6B at its real shapes with random bf16 weights in the Hub's
format, the real Qwen3 tokenizer, GSM8K-format Parquet, chat template, rewards, vanilla rollout) runs
through the trainer's own entry (``startup.prepare`` + ``main.train``) in a child process per arm:

* ``packed``: this trainer (packing on, rows of ``--row`` tokens);
* ``tunix``: the same job with packing off (Tunix's own unpacked reference/old-log-prob/train passes).

Measured per arm: peak resident memory of the child (VmHWM, and sampled VmRSS), per phase (rollout,
reference, old_logps, train, weight_sync, and ``host`` for everything between them: rewards, advantages,
packing) the RSS at the phase's start, its peak and end, and JAX's live arrays at the phase's start and
end by kind (actor parameters, optimizer state, reference parameters, the rollout's own weights where they
are not the actor's, Tunix's anchor copy of the policy, other). What lives only inside a compiled step
(gradients, activations, logits, KV cache) is the phase's peak minus its start, with its parts computed
from the shapes (``transient_shapes``). A child whose RSS passes ``--limit-gib`` is killed and recorded as
"does not fit" with the phases it reached.

    JAX_PLATFORMS=cpu .venv/bin/python bench/memory.py                  # both arms, 28 layers
    JAX_PLATFORMS=cpu .venv/bin/python bench/memory.py --layers 4 --arms packed --out /tmp/m.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "trainer"), str(ROOT), str(ROOT / "bench")]

import memory_job  # noqa: E402
from memory_probe import GIB, Probe, available_gib, load, rss_bytes  # noqa: E402

# ---------------------------------------------------------------------------------------------- child


def child(a: argparse.Namespace) -> None:
    """One arm, in this process: the trainer's own start-up and training, with the probe around phases."""
    from rljob_trainer import tunix_bridge
    from rljob_trainer.models import families as models
    from rljob_trainer.run import main as trainer_main
    from rljob_trainer.run import startup
    from rljob_trainer.telemetry import progress

    from rljob.api import load_rljob

    probe = Probe(Path(a.child_out))
    job = load_rljob(a.child_config)
    if a.no_packing:
        ns = argparse.Namespace(max_steps=None, seed=None, no_packing=True, metrics_port=None, workdir=None)
        job = trainer_main.apply_overrides(job, ns, a.child_config)
        from tunix.rl.grpo.grpo_learner import GRPOLearner

        # The tunix arm is Tunix's own learner; packing off would otherwise take UnpackedGRPOLearner.
        tunix_bridge.unpacked_learner = lambda spec: (GRPOLearner, {})
    if a.layers != 28:  # a cheaper probe at full width: Tunix's named config with fewer layers
        original = models.model_config
        models.model_config = lambda m: dataclasses.replace(original(m), num_layers=a.layers)

    def phase(self: Any, name: str) -> Any:
        return _both(original_phase(self, name), probe.phase(name))

    original_phase = progress.StepRecorder.phase
    progress.StepRecorder.phase = phase  # type: ignore[method-assign]
    original_build = tunix_bridge.build

    def build(*args: Any, **kwargs: Any) -> Any:
        probe.run = original_build(*args, **kwargs)
        return probe.run

    tunix_bridge.build = build
    original_begin = progress.StepRecorder.begin

    def begin(self: Any, step: int) -> None:
        probe.step = step
        original_begin(self, step)

    progress.StepRecorder.begin = begin  # type: ignore[method-assign]
    started = time.perf_counter()
    with probe.phase("prepare"):
        workload = startup.prepare(job)
    with probe.phase("build_and_train"):
        run = trainer_main.train(job, [], workload)
    reports = [
        {"step": r.step, "seconds": r.seconds, "phases": r.phase_seconds, "reward_mean": r.reward_mean}
        for r in run.recorder.reports
    ]
    probe.dump(reports=reports, wall_s=time.perf_counter() - started, done=True, final_live=probe.kinds())


@contextlib.contextmanager
def _both(a: Any, b: Any) -> Any:
    with a, b:
        yield


# --------------------------------------------------------------------------------------------- parent


def run_arm(arm: str, a: argparse.Namespace, config: Path, workdir: Path) -> dict[str, Any]:
    out = workdir / f"arm-{arm}.json"
    out.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        __file__,
        "--child-config",
        str(config),
        "--child-out",
        str(out),
        "--layers",
        str(a.layers),
    ] + (["--no-packing"] if arm == "tunix" else [])
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), "TQDM_DISABLE": "1"}
    load0, started = load(), time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log_lines: list[str] = []
    threading.Thread(target=lambda: log_lines.extend(proc.stdout or []), daemon=True).start()
    peak, killed = 0, False
    try:
        while proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                peak = max(peak, rss_bytes(proc.pid))
            if peak > a.limit_gib * GIB:
                killed = True
                break
            time.sleep(0.05)
    finally:  # over the limit, or this process interrupted: never leave a big child behind
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    doc = json.loads(out.read_text()) if out.is_file() else {"records": []}
    doc |= {
        "arm": arm,
        "rc": proc.returncode,
        "fits": not killed and proc.returncode == 0 and doc.get("done", False),
        "killed_over_limit_gib": a.limit_gib if killed else None,
        "peak_rss_sampled": peak,
        "seconds": time.time() - started,
        "load_before": load0,
        "load_after": load(),
        "log_tail": "".join(log_lines[-15:]),
    }
    return doc


def summarize(doc: dict[str, Any], params: int) -> dict[str, Any]:
    """Per phase: the largest peak over steps (GiB) and the live arrays at its start by kind."""
    phases: dict[str, Any] = {}
    for rec in doc["records"]:
        name = rec["phase"]
        cur = phases.get(name)
        if cur is None or rec["rss_peak"] > cur["peak_gib"] * GIB:
            phases[name] = {
                "step": rec["step"],
                "peak_gib": round(rec["rss_peak"] / GIB, 3),
                "start_gib": round(rec["rss_start"] / GIB, 3),
                "transient_gib": round((rec["rss_peak"] - rec["rss_start"]) / GIB, 3),
                "live_start_gib": {k: round(v / GIB, 3) for k, v in sorted(rec["live_start"].items())},
            }
    peak = max(doc.get("vm_hwm", 0), doc.get("peak_rss_sampled", 0))
    steps = doc.get("reports", [])
    later = [r["seconds"] for r in steps[1:]] or [r["seconds"] for r in steps]
    return {
        "fits": doc["fits"],
        "peak_rss_gib": round(peak / GIB, 3),
        "bytes_per_parameter_at_peak": round(peak / params, 2),
        "step_seconds": [round(r["seconds"], 2) for r in steps],
        "step_seconds_after_first": round(sum(later) / len(later), 2) if later else None,
        "phases": phases,
    }


def transient_shapes(a: argparse.Namespace) -> dict[str, Any]:
    """What the compiled steps hold only while they run, computed from the job's shapes (bytes)."""
    cfg = memory_job.qwen3_0p6b_config(a.layers)
    d, v, layers = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    kv, hd = cfg["num_key_value_heads"], cfg["head_dim"]
    seqs = a.batch * a.generations
    return {
        "kv_cache_bf16": seqs * a.total * layers * 2 * kv * hd * 2,
        "prefill_logits_fp32": seqs * a.prompt * v * 4,
        "unpacked_logits_fp32": seqs * a.total * v * 4,
        "head_chunk_logits_fp32": 256 * v * 4,
        "embedding_fp32_copy": v * d * 4,
    }


def xla_train_step(a: argparse.Namespace, layers: int, remat: bool = True) -> dict[str, float]:
    """XLA's buffer assignment of the packed train step (value and grad of the GRPO loss) at the job's
    shapes: one micro-batch of ``batch x generations`` sequences (prompt + completion of the maximal
    lengths) in rows of ``row``, bf16 parameters as the trainer loads them, compiled only (no memory
    used). ``temp`` is what the step holds beyond its inputs and outputs: activations kept for the
    backward pass, the head chunk's logits, attention blocks; ``output`` holds the gradients.
    ``remat``: the trainer's per-layer recomputation (``stack.REMAT_LAYERS``) on or off."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from rljob_trainer.models import families as models
    from rljob_trainer.packing import stack
    from rljob_trainer.packing.adapter import resolve_attention
    from rljob_trainer.packing.example import pack_train_example
    from rljob_trainer.packing.learner import pick_attention_block
    from rljob_trainer.packing.loss import make_packed_grpo_loss_fn
    from rljob_trainer.packing.testing import PAD_ID, grpo_config, random_train_example
    from tunix.models.qwen3 import model as q3

    from rljob.api.spec import ModelSpec

    config = models.model_config(ModelSpec(family="qwen3", size="0.6b"))
    config = dataclasses.replace(config, num_layers=layers)
    model = nnx.eval_shape(lambda: q3.Qwen3(config, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)
    state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16), state)
    n = a.batch * a.generations
    completion = a.total - a.prompt
    ex = random_train_example(
        [a.prompt] * n, [completion] * n, max_prompt=a.prompt, max_completion=completion, seed=0
    )
    block = pick_attention_block(a.row)
    packed, _ = pack_train_example(ex, a.row, pad_id=PAD_ID, attention_block=block)
    fn = make_packed_grpo_loss_fn(attention=resolve_attention(model, "auto"), block=block, vocab_chunk=256)
    step = jax.jit(jax.value_and_grad(lambda st: fn(nnx.merge(graphdef, st), packed, grpo_config())[0]))
    stack.REMAT_LAYERS, saved = remat, stack.REMAT_LAYERS
    try:
        m = step.lower(state).compile().memory_analysis()
    finally:
        stack.REMAT_LAYERS = saved
    return {
        "layers": layers,
        "remat": remat,
        "temp_gib": round(m.temp_size_in_bytes / GIB, 3),
        "arguments_gib": round(m.argument_size_in_bytes / GIB, 3),
        "output_gib": round(m.output_size_in_bytes / GIB, 3),
    }


def xla_analysis(a: argparse.Namespace) -> list[dict[str, float]]:
    """The compiled packed train step with per-layer remat at ``--xla-layers``, without at the other list."""
    on = [xla_train_step(a, int(n)) for n in a.xla_layers.split(",") if n]
    return on + [xla_train_step(a, int(n), remat=False) for n in a.xla_layers_no_remat.split(",") if n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=28, help="Qwen3-0.6B has 28")
    ap.add_argument("--arms", default="packed,tunix")
    ap.add_argument("--rewards", default="mathAnswer,regex")
    ap.add_argument("--prompt", type=int, default=192, help="maxPrefillPredictLength")
    ap.add_argument("--total", type=int, default=256, help="maxTargetLength")
    ap.add_argument("--row", type=int, default=1024, help="packing.maxSeqTokenPerTpu")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--beta", type=float, default=0.04)
    ap.add_argument("--limit-gib", type=float, default=14.0, help="kill an arm above this RSS")
    ap.add_argument("--workdir", default=str(Path.home() / ".cache/rljob/memory-bench"))
    ap.add_argument("--out", default=str(ROOT / "bench/results/memory.json"))
    ap.add_argument("--xla-layers", default="0,2,28", help="layer counts of the compiled-step analysis")
    ap.add_argument("--xla-layers-no-remat", default="2,8", help="the same without per-layer remat")
    ap.add_argument(
        "--xla-only", action="store_true", help="only the compiled-step analysis (JSON on stdout)"
    )
    ap.add_argument("--child-config", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("--no-packing", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_config:
        child(a)
        return
    if a.xla_only:
        print(json.dumps(xla_analysis(a)))
        return

    import jax
    import yaml

    workdir = Path(a.workdir)
    tokenizer = memory_job.fetch_tokenizer(workdir)
    ckpt = memory_job.write_checkpoint(workdir / f"qwen3-0.6b-{a.layers}l", a.layers, tokenizer)
    data = memory_job.write_gsm8k(workdir / "gsm8k.parquet")
    job = memory_job.manifest(
        ckpt,
        data,
        rewards=a.rewards.split(","),
        prompt=a.prompt,
        total=a.total,
        row=a.row,
        batch=a.batch,
        generations=a.generations,
        steps=a.steps,
        beta=a.beta,
    )
    job["spec"]["metrics"]["port"] = 19_000 + os.getpid() % 1000
    config = workdir / "rljob.yaml"
    config.write_text(yaml.safe_dump(job, sort_keys=False))
    params = memory_job.parameter_count(a.layers)
    doc: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": shlex.join([os.path.relpath(sys.executable, ROOT), "bench/memory.py", *sys.argv[1:]]),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": platform.machine(),
            "available_gib_before": round(available_gib(), 1),
        },
        "jax": jax.__version__,
        "args": {k: v for k, v in vars(a).items() if not k.startswith("child") and k != "no_packing"},
        "model": f"qwen3 0.6b shapes, {a.layers} layers, {params:,} parameters, bf16 checkpoint (random)",
        "job": job["spec"],
        "transient_shapes_gib": {k: round(v / GIB, 3) for k, v in transient_shapes(a).items()},
        "arms": {},
    }
    for arm in a.arms.split(","):
        if available_gib() < a.limit_gib + 1:
            doc["arms"][arm] = {"skipped": f"only {available_gib():.1f} GiB available"}
            continue
        raw = run_arm(arm, a, config, workdir)
        doc["arms"][arm] = {
            **summarize(raw, params),
            "rc": raw["rc"],
            "load": [raw["load_before"], raw["load_after"]],
        }
        doc["arms"][arm]["raw"] = raw
        print(
            json.dumps({arm: {k: v for k, v in doc["arms"][arm].items() if k != "raw"}}, indent=1), flush=True
        )
        if raw["rc"] not in (0, -9):
            print(raw["log_tail"], file=sys.stderr)
    doc["xla_train_step"] = xla_analysis(a)
    doc["load_after"] = load()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
