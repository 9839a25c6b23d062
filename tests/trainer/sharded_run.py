"""Short trainer runs with Tunix's sharding constraints live on a CPU mesh, as a TPU applies them.

Tunix's models constrain activations with ``shard(x, spec)`` (``tunix.models.<family>.model.shard``),
which returns ``x`` untouched on CPU. A value of the wrong rank for the model's sharding rules therefore
passes every CPU run and crashes on the first TPU step (it did: the unpacked learner's last-layer tail
ran Tunix's MLP on gathered ``[N, D]`` states, ``P('fsdp', None, 'tp')`` on a rank-2 value). Here
``live_shardings`` makes every family's ``shard`` apply its constraint on CPU too (the same code minus the
platform check), the packed passes scan their layers as on a TPU (``stack.SCAN_LAYERS``; the tiny
models' two layers scan where the head is whole, the chunked head splits the last one off), and each case
runs the trainer as a pod would (``run.main.train``: the trainer's mesh,
model build, learner choice and every actor-side pass). Run as a script with
``--xla_force_host_platform_device_count`` set for a multi-device mesh; prints one JSON line per case.

    python -m tests.trainer.sharded_run qwen3:0:chunked:0.04:2 ...
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from tests import jax_cache

FAMILIES = ("qwen3", "qwen2", "llama3", "gemma3")


@contextlib.contextmanager
def live_shardings() -> Iterator[dict[str, int]]:
    """Every Tunix family's ``shard`` applies its constraint on any platform (as Tunix's own, less the
    ``platform == 'cpu'`` check); yields a call counter."""
    import jax
    from jax import sharding as shd
    from jax.interpreters import pxla

    calls = {"constraints": 0}

    def shard(x: Any, spec: tuple[str | None, ...], eager: bool = False) -> Any:
        mesh = pxla.thread_resources.env.physical_mesh
        if mesh.empty:
            return x
        calls["constraints"] += 1
        sharding = shd.NamedSharding(mesh, shd.PartitionSpec(*spec))
        return jax.device_put(x, sharding) if eager else jax.lax.with_sharding_constraint(x, sharding)

    # gemma3 calls the shared tunix.utils.sharding_utils.shard; the others their module's own copy.
    modules = [importlib.import_module(f"tunix.models.{f}.model") for f in FAMILIES if f != "gemma3"]
    modules.append(importlib.import_module("tunix.utils.sharding_utils"))
    saved = [m.shard for m in modules]
    for m in modules:
        m.shard = shard
    try:
        yield calls
    finally:
        for m, old in zip(modules, saved, strict=True):
            m.shard = old


@contextlib.contextmanager
def train_step_compiles() -> Iterator[list[str]]:
    """Yields the names of the threads that compile the actor's train step (JAX's compile log)."""
    import logging

    import jax

    threads: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Compiling jit(_train_step) "):
                threads.append(record.threadName)

    handler, root = Seen(logging.WARNING), logging.getLogger()
    root.addHandler(handler)
    jax.config.update("jax_log_compiles", True)
    try:
        yield threads
    finally:
        jax.config.update("jax_log_compiles", False)
        root.removeHandler(handler)


def case_job(family: str, packing: int, beta: float, iterations: int, port: int, budget: int = 0) -> Any:
    """A tiny RLJob of ``family``: 2 prompts x 4 generations (8 sequences: a 4-device mesh splits them
    evenly, as the trainer's batch rules require), 2 steps; ``budget``: ``spec.grpo.maxTokensPerTpu``."""
    from rljob.api import parse_rljob
    from tests.trainer.manifests import tiny_rljob

    doc = tiny_rljob(
        maxTargetLength=48,
        rollout={"engine": "vanilla", "temperature": 1.0},
        grpo={
            "numGenerations": 4,
            "batchSize": 2,
            "beta": beta,
            "numIterations": iterations,
            "learningRate": 0.01,
            "maxSteps": 2,
            "seed": 7,
            **({"maxTokensPerTpu": budget} if budget else {}),
        },
    )
    doc["spec"]["model"]["family"] = family
    doc["spec"]["packing"] = {"maxSeqTokenPerTpu": packing}
    doc["spec"]["metrics"] = {"port": port}
    return parse_rljob(copy.deepcopy(doc))


def run_case(case: str, port: int) -> dict[str, Any]:
    """``family:packing:head:beta:iterations[:budget]``; head ``chunked`` = the head (and last layer's
    tail) at completion columns in token chunks, as the trainer runs a real vocabulary; ``whole`` = the
    tiny vocabulary's own choice (the whole head). ``budget``: token-budget chunks (and, where their
    shape is fixed, the train step compiled beside the first rollout: ``packing.prewarm``)."""
    import jax
    from rljob_trainer.packing import head, stack
    from rljob_trainer.run import main as trainer_main

    family, packing, head_kind, beta, iterations, *budget = case.split(":")
    saved, saved_scan = head.CHUNK_ABOVE_VOCAB, stack.SCAN_LAYERS
    head.CHUNK_ABOVE_VOCAB = 0 if head_kind == "chunked" else saved  # the auto choice of a real vocabulary
    stack.SCAN_LAYERS = True  # the packed passes scan alike layers, as on a TPU (``stack.scans()``)
    try:
        with live_shardings() as calls, train_step_compiles() as compiled_by:
            job = case_job(family, int(packing), float(beta), int(iterations), port, int(*budget or [0]))
            run = trainer_main.train(job)
    finally:
        head.CHUNK_ABOVE_VOCAB, stack.SCAN_LAYERS = saved, saved_scan
    learner = run.learner
    return {
        "case": case,
        "devices": len(jax.devices()),
        "learner": type(learner).__name__,
        "vocab_chunk": getattr(learner, "vocab_chunk", None),
        "steps": [r.step for r in run.recorder.reports],
        "phases": sorted(run.recorder.reports[-1].phase_seconds),
        "constraints": calls["constraints"],
        "chunk_rows": getattr(learner, "chunk_rows", 0),
        "train_step_compiled_by": compiled_by,
    }


def main(argv: list[str]) -> int:
    jax_cache.enable()  # the suite's compilation cache: these runs time no compile
    for i, case in enumerate(argv):
        print(json.dumps(run_case(case, 19500 + i)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
