"""Qwen3-0.6B at its real shape on the chip, packing on and off (the API's default), as a pod runs it.

The job of the first chip runs (docs/tpu.md): 28 layers, random bf16 weights with the EOS rows scaled so
completions end at varied lengths (``bench/memory_job.write_checkpoint(eos_scale=7.5)``), the real Qwen3
tokenizer, GSM8K-format Parquet, ``mathAnswer`` + ``regex`` rewards, 2 prompts x 8 generations, prompt
256 / total 768, rows of 2,048 (packing on). Packing off crashed at step 1 before the fix to
``adapter.last_layer_tail`` (tests/trainer/test_tpu_shardings.py is its CPU twin).

Needs the tokenizer files (fetched where there is a network: ``bench/memory_job.fetch_tokenizer``) in
``$RLJOB_QWEN3_TOKENIZER`` (default ``.tpu/qwen3-tokenizer``, carried to the chip with ``.tpu``).
``RLJOB_TPU_STEPS``: steps per run (default 3).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.tpu import chip

TOKENIZER = Path(os.environ.get("RLJOB_QWEN3_TOKENIZER", chip.ROOT / ".tpu" / "qwen3-tokenizer"))
WORK = Path(os.environ.get("RLJOB_TPU_CACHE", "/tmp/rljob-tpu"))
STEPS = int(os.environ.get("RLJOB_TPU_STEPS", "3"))

PREPARE = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, "bench")
import memory_job
tok, work, steps, row = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ckpt = memory_job.write_checkpoint(work / "qwen3-0.6b", 28, tok, eos_scale=7.5)
data = memory_job.write_gsm8k(work / "gsm8k.parquet")
doc = memory_job.manifest(ckpt, data, rewards=["mathAnswer", "regex"], prompt=256, total=768, row=row,
                          batch=2, generations=8, steps=steps, beta=0.04)
doc["metadata"]["name"] = "qwen3-0p6b-tpu"
doc["spec"]["metrics"] = {"port": 9464}
out = work / f"rljob-{row}.json"
out.write_text(json.dumps(doc))
print(out)
"""


@pytest.mark.parametrize("row", [2048, 0], ids=["packed", "unpacked"])
def test_qwen3_0p6b_trains_on_the_chip(row: int, record) -> None:
    if not (TOKENIZER / "tokenizer.json").is_file():
        pytest.skip(f"no Qwen3 tokenizer at {TOKENIZER} (bench/memory_job.fetch_tokenizer where online)")
    prep = chip.run(
        ["python", "-c", PREPARE, str(TOKENIZER), str(WORK), str(STEPS), str(row)],
        timeout=600,
        JAX_PLATFORMS="cpu",
    )
    assert prep["rc"] == 0, prep["stderr_tail"]
    config = prep["stdout"].strip().splitlines()[-1]
    res = chip.run(
        ["python", "-m", "rljob_trainer", "--config", config, "--metrics-port", "9464"],
        timeout=1500,
        TPU_WORKER_HOSTNAMES="localhost",
        RLJOB_NO_SOCKETS="1",
    )
    steps = chip.steps(res["stdout"])
    record(
        f"qwen3_0p6b_{'packed' if row else 'unpacked'}",
        {
            "rc": res["rc"],
            "seconds": res["seconds"],
            "shape": {"prompts": 2, "generations": 8, "prompt": 256, "total": 768, "row": row},
            "steps": steps,
            "log": [ln for ln in res["stdout"].splitlines() if not ln.startswith("step ")][-12:],
            "stderr_tail": res["stderr_tail"][-2000:] if res["rc"] else "",
            "versions": chip.versions(),
        },
    )
    assert res["rc"] == 0, res["stdout"][-2000:] + res["stderr_tail"]
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    assert all(json.dumps(s) and s["seconds"] > 0 for s in steps)
