"""Helpers for tests that run the real trainer as a subprocess (``python -m rljob_trainer``) on CPU.

Why subprocesses: SIGTERM, exit codes and ``jax.distributed`` are per process, and a fresh process keeps
the runs hermetic (same XLA flags, same device count) so parameters can be compared bit for bit.
JAX's persistent compilation cache stays off in these runs (tests/conftest.py: their tests watch the first
step compile) unless a test turns it on (``JAX_ENABLE_COMPILATION_CACHE=true``); the trainer then caches in
the job's own directory (``run/compile_cache.py``), and ``env`` only makes it keep every program, however
small or quick to compile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def manifest(
    name: str,
    steps: int,
    *,
    ckpt_dir: Path | None = None,
    interval: int = 100,
    port: int = 9464,
    baseline: float | None = None,
    seed: int = 7,
) -> dict[str, Any]:
    """A tiny-model RLJob (2-layer random qwen3, 2 prompts x 2 generations, 16 new tokens)."""
    spec: dict[str, Any] = {
        "image": "img",
        "model": {"family": "qwen3", "size": "tiny"},
        "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2"},
        "maxPrefillPredictLength": 16,
        "maxTargetLength": 32,
        "grpo": {"numGenerations": 2, "batchSize": 2, "maxSteps": steps, "seed": seed, "learningRate": 0.003},
        "metrics": {"port": port},
    }
    if baseline is not None:
        spec["metrics"]["stepTimeBaselineSeconds"] = baseline
    if ckpt_dir is not None:
        spec["checkpoint"] = {"directory": str(ckpt_dir), "interval": interval}
    return {"apiVersion": "rljob.dev/v1alpha1", "kind": "RLJob", "metadata": {"name": name}, "spec": spec}


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RLJOB_", "XLA_FLAGS"))}
    return {
        **base,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'trainer'}:{ROOT / 'operator'}",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def start(config: Path, *args: str, **extra_env: str) -> subprocess.Popen:
    """Start the trainer; stdout and stderr merged, line-buffered text."""
    return subprocess.Popen(
        [sys.executable, "-m", "rljob_trainer", "--config", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        env=env(**extra_env),
        cwd=ROOT,
    )


def run(config: Path, *args: str, timeout: float = 240, **extra_env: str) -> tuple[int, str]:
    p = start(config, *args, **extra_env)
    out, _ = p.communicate(timeout=timeout)
    return p.returncode, out


def scrape(port: int, timeout: float = 2.0) -> dict[tuple[str, frozenset], float] | None:
    """``/metrics`` as {(sample name, labels): value}; None when nothing answers yet."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    out: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lb), v in samples.items() if n == name and want <= lb)


def series(samples: dict[tuple[str, frozenset], float], name: str) -> list[dict[str, str]]:
    return [dict(lb) for (n, lb) in samples if n == name]


def wait_for_line(proc: subprocess.Popen, needle: str, lines: list[str], timeout: float) -> bool:
    """Read the trainer's output into ``lines`` until a line contains ``needle`` (False: it ended first)."""
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            return False
        lines.append(line)
        if needle in line:
            return True
    return False


def load_params(ckpt_dir: Path, step: int) -> dict[str, Any]:
    """The actor parameters saved at ``step``, as numpy arrays keyed by path."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    tree = ocp.StandardCheckpointer().restore(str(ckpt_dir / str(step) / "params"))
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in flat}
