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
# one token-budget chunk of the v5e example: 18 sequences in two packed rows of 8,192, splash window 1,024
PACKED_CHUNK = (
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


def test_decode_on_v5e_writes_no_whole_cache_back_each_step_nor_copies_it_per_call() -> None:
    rows = {r["arm"]: r for r in aot("decode")}
    cache = 32 * 1024 * 28 * 2 * 8 * 128 * 2  # the call's KV cache, bf16: 3.5 GiB
    assert rows["tunix"]["whole_cache_copies_per_step"] == 28, rows  # one per layer: Tunix's jit
    assert rows["rljob"]["whole_cache_copies_per_step"] == 0, rows  # decode.DECODE_COMPILER_OPTIONS
    # Tunix's cache layout: every layer's key and value cache copied into the attention's order as the
    # call begins and back as it ends, a second cache of temporaries (what failed to load on the chip at
    # 64 sequences); decode.KV_LAYOUT: none
    assert rows["default-layout"]["whole_cache_copies_per_call"] == 2 * 2 * 28, rows
    assert rows["default-layout"]["temp_bytes"] > 0.9 * cache, rows
    assert rows["rljob"]["whole_cache_copies_per_call"] == 0, rows
    assert rows["rljob"]["temp_bytes"] < 0.1 * cache, rows
    # four pieces (decode.segmented_decode): a piece's copy of the cache beside the whole one, the price
    # that keeps them off by default (decode.SEGMENTS)
    assert rows["segments4"]["temp_bytes"] > rows["rljob"]["temp_bytes"] + 2 * GIB, rows


@pytest.mark.parametrize("arm", ["bounded", "shared"])
def test_bounded_decode_on_v5e_reads_each_block_in_place(arm: str) -> None:
    """``decode.BOUNDED`` (``decode_attention``): the blocks of the cache a decode step reads, and with
    prompts shared by groups of 8 each group's prompt positions, are sliced inside the fusions that read
    them (a key and a value read in their scores' or weights' matmul, every layer), never materialized,
    and no whole cache is copied: temporaries as the trainer's decode."""
    (row,) = aot("decode", "--arm", arm)
    assert row["block_values_in_fusions"] >= (2 if arm == "bounded" else 4) * 28, row  # compiled so
    assert row["block_buffers"] == 0, row
    assert row["whole_cache_copies_per_step"] == row["whole_cache_copies_per_call"] == 0, row
    assert row["temp_bytes"] < 0.1 * 32 * 1024 * 28 * 2 * 8 * 128 * 2, row


def test_prefill_on_v5e_needs_no_second_cache_in_either_layout() -> None:
    """The prefill writes the prompt's keys and values into the cache: no layout copy of a whole cache in
    Tunix's layout nor in decode.KV_LAYOUT (only memory placement's two), temporaries well under one."""
    rows = {r["arm"]: r for r in aot("prefill")}
    cache = 32 * 1024 * 28 * 2 * 8 * 128 * 2
    for arm in ("default-layout", "rljob"):
        assert rows[arm]["whole_cache_copies_per_call"] <= 2, rows
        assert rows[arm]["temp_bytes"] < 0.2 * cache, rows


def test_tunix_train_step_needs_what_the_chip_refused() -> None:
    """Tunix's GRPO train step at 16 sequences of 256 + 512: the chip refused 21.74 GiB of temporaries
    (2026-12-06); the offline compile must agree within 5%, or its fit predictions mean nothing."""
    (row,) = aot("train", "--sequences", "16", "--prompt", "256", "--total", "768")
    assert abs(row["temp_bytes"] / GIB - 21.74) < 0.05 * 21.74, row
    assert not row["fits_v5e"], row


def test_packed_chunk_of_the_v5e_example_fits_with_the_splash_window() -> None:
    """Two packed rows of 8,192 (one token-budget chunk of the v5e example) with splash attending within
    1,024 positions: compiles for the chip (the Mosaic kernels included) and fits with the state."""
    (row,) = aot(*PACKED_CHUNK)
    assert row["fits_v5e"], row


def test_scanned_packed_layers_compile_for_v5e_with_splash() -> None:
    """``stack.SCAN_LAYERS``: the packed step with its layers in one scan compiles for the chip, splash
    kernels included (with the trainer's own custom-VJP remat inside the scan it did not lower; CPU never
    lowers splash, so only this compile sees it). Four layers: the scan's body is the same."""
    (row,) = aot(
        *PACKED_CHUNK,
        "--layers",
        "4",
        "--scan-layers",
    )
    assert row["scan_layers"] and row["fits_v5e"], row
    assert row["executable_bytes"] > 0, row
