"""The sampler's decode loop compiled for a v5e chip, on this CPU machine (``bench/tpu_aot.py``): Tunix's
jit copies a whole layer cache back to HBM every step; with ``memory.DECODE_COMPILER_OPTIONS`` (what the
trainer applies on a TPU) XLA inserts none.

Needs the chip's libtpu as a compile target (``LIBTPU_SITE``, bench/tpu_aot.py says how); skipped without
it, as in CI. Qwen3-0.6B whole (~35 s a compile): with two of its layers XLA makes no such copy either,
so the placement depends on the whole program and only the real one says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBTPU_SITE = os.environ.get("LIBTPU_SITE", "")

pytestmark = pytest.mark.skipif(
    not (Path(LIBTPU_SITE) / "libtpu").is_dir(), reason="no libtpu to compile for a TPU (LIBTPU_SITE)"
)


def test_decode_on_v5e_writes_no_whole_cache_back_each_step() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "tpu_aot.py"), "decode"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    rows = {r["arm"]: r for r in (json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{"))}
    assert out.returncode == 0 and set(rows) == {"tunix", "rljob"}, out.stderr[-3000:]
    assert rows["tunix"]["whole_cache_copies_per_step"] == 28, rows  # one per layer
    assert rows["rljob"]["whole_cache_copies_per_step"] == 0, rows
