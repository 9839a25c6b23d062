"""Every trainer path with Tunix's sharding constraints live, on the trainer's own mesh over CPU devices.

What a TPU applies and CPU skips (``tests/trainer/sharded_run.py``): the first chip run of Qwen3-0.6B with
packing off crashed at step 1 (``with_sharding_constraint`` ``P('fsdp', None, 'tp')`` on a rank-2 value:
Tunix's MLP on the unpacked learner's gathered ``[N, D]`` states), while every CPU test passed. Each
case here is a 2-step ``run.main.train`` (reference, old-policy and train passes) in a subprocess whose
JAX has 4 CPU devices (the trainer's mesh: ``fsdp`` 4) or 1 (the chip's shape: the token stream on).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

# family:packing:head:beta:iterations. Packing off: the unpacked learner (qwen3/qwen2/llama3) or Tunix's
# GRPOLearner (gemma3); on: the packed learner (blocked attention; dense for gemma3). ``chunked``: the
# head and the last layer's tail at completion columns, as for any real vocabulary.
MESH_CASES = [
    "qwen3:0:chunked:0.04:2",
    "qwen3:128:chunked:0.04:2",
    "qwen2:0:whole:0.0:1",
    "qwen2:128:chunked:0.0:2",
    "llama3:0:chunked:0.04:1",
    "llama3:128:whole:0.04:1",
    "gemma3:0:whole:0.04:2",
    "gemma3:128:whole:0.0:1",
    "gemma3:256:whole:0.0:1:256",  # token-budget chunks of one row a device: the step compiled ahead
]
ONE_DEVICE_CASES = ["qwen3:0:chunked:0.04:2", "qwen3:128:chunked:0.04:2"]  # the chip: token stream on


def run_cases(cases: list[str], devices: int) -> list[dict]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    env.pop("TPU_WORKER_HOSTNAMES", None)
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.trainer.sharded_run", *cases],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("devices, cases", [(4, MESH_CASES), (1, ONE_DEVICE_CASES)], ids=["fsdp4", "fsdp1"])
def test_every_path_trains_with_live_sharding_constraints(devices: int, cases: list[str]) -> None:
    results = run_cases(cases, devices)
    assert [r["case"] for r in results] == cases
    for r in results:
        family, packing, head, beta, _iterations, *budget = r["case"].split(":")
        assert r["devices"] == devices
        assert r["steps"] == [1, 2], r
        assert r["constraints"] > 0, r  # the constraints were live (traced through the patched shard)
        want = "UnpackedGRPOLearner" if packing == "0" else "PackedGRPOLearner"
        if family == "gemma3" and packing == "0":
            want = "GRPOLearner"
        assert r["learner"] == f"Instrumented{want}", r
        if head == "chunked":
            assert r["vocab_chunk"], r  # the head (and the last layer's tail) ran at completion columns
        if float(beta) > 0:
            assert "reference" in r["phases"], r
        if budget:
            assert r["chunk_rows"] == devices, r
        # one shape known at start (the unpacked learner's; packed with a budget): compiled once, by the
        # thread beside the first rollout; otherwise by the trainer's main thread
        ahead = want == "UnpackedGRPOLearner" or bool(budget)
        assert set(r["train_step_compiled_by"]) == ({"rljob-prewarm"} if ahead else {"MainThread"}), r
