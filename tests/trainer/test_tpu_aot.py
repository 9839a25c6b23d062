"""The trainer's programs compiled for a v5e chip on this CPU machine (``bench/tpu_aot.py``): what XLA's
TPU passes decide (buffer placement, temporaries) without the chip.

Needs the chip's libtpu as a compile target (``LIBTPU_SITE``, bench/tpu_aot.py says how); skipped without
it, as in CI. Qwen3-0.6B whole (~35-90 s a compile): with two of its layers XLA makes no decode copy
either, so the placement depends on the whole program and only the real one says.
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
GIB = 2**30

pytestmark = pytest.mark.skipif(
    not (Path(LIBTPU_SITE) / "libtpu").is_dir(), reason="no libtpu to compile for a TPU (LIBTPU_SITE)"
)


def aot(*args: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "tpu_aot.py"), *args],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]


def test_decode_on_v5e_writes_no_whole_cache_back_each_step() -> None:
    rows = {r["arm"]: r for r in aot("decode")}
    assert rows["tunix"]["whole_cache_copies_per_step"] == 28, rows  # one per layer: Tunix's jit
    assert rows["rljob"]["whole_cache_copies_per_step"] == 0, rows  # decode.DECODE_COMPILER_OPTIONS
    # four pieces (decode.segmented_decode): a piece's copy of the cache beside the whole one, the price
    # that keeps them off by default (decode.SEGMENTS)
    assert rows["segments4"]["temp_bytes"] > rows["rljob"]["temp_bytes"] + 2 * GIB, rows


def test_tunix_train_step_needs_what_the_chip_refused() -> None:
    """Tunix's GRPO train step at 16 sequences of 256 + 512: the chip refused 21.74 GiB of temporaries
    (2026-12-06); the offline compile must agree within 5%, or its fit predictions mean nothing."""
    (row,) = aot("train", "--sequences", "16", "--prompt", "256", "--total", "768")
    assert abs(row["temp_bytes"] / GIB - 21.74) < 0.05 * 21.74, row
    assert not row["fits_v5e"], row


def test_packed_chunk_of_the_v5e_example_fits_with_the_splash_window() -> None:
    """Two packed rows of 8,192 (one token-budget chunk of the v5e example) with splash attending within
    1,024 positions: compiles for the chip (the Mosaic kernels included) and fits with the state."""
    (row,) = aot(
        "train",
        "--sequences",
        "18",
        "--prompt",
        "384",
        "--total",
        "1024",
        "--packed-rows",
        "2",
        "--window",
        "1024",
    )
    assert row["fits_v5e"], row
