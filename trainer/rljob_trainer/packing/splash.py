"""Tunix's splash (Pallas flash) attention on packed rows: the block that divides a row, the model's flash
path switched on while a call traces, and the mask narrowed to the longest sequence (``splash_window``).
Used by ``adapter`` (the packed forward) and ``learner`` (the block chosen at start)."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

SPLASH_BLOCKS = (1024, 512, 256, 128)  # Tunix's default first; splash needs multiples of 128


def splash_block(row_len: int) -> int:
    """Largest splash block (query and key) dividing a packed row; rows are multiples of 128 (API rule)."""
    for block in SPLASH_BLOCKS:
        if row_len % block == 0:
            return block
    raise ValueError(
        f"spec.packing.maxSeqTokenPerTpu={row_len} must be a multiple of 128 for splash attention"
    )


@contextlib.contextmanager
def flash_attention(model: Any, block: int, window: int = 0) -> Iterator[None]:
    """Tunix's flash (splash) path on for calls inside (read when a jitted call traces), then restored.

    Every layer holds the model's one config object, so setting it on ``model.config`` reaches them all.
    ``window`` > 0 (the longest sequence a row can hold): Tunix's static causal splash mask becomes causal
    within the last ``window`` positions (``splash_window``).
    """
    cfg = model.config
    saved = (cfg.use_flash_attention, cfg.flash_attention_block_size)
    cfg.use_flash_attention, cfg.flash_attention_block_size = True, block
    try:
        with splash_window(model, window):
            yield
    finally:
        cfg.use_flash_attention, cfg.flash_attention_block_size = saved


@contextlib.contextmanager
def splash_window(model: Any, window: int) -> Iterator[None]:
    """Tunix's splash mask, causal over the whole row, made causal within ``window`` positions while
    inside (``window`` 0: unchanged).

    Why: splash takes a static mask and uses the segment ids only to zero scores, so on a packed row it
    computes every causal block of the row: on the chip, rows of 8,192 holding ~9 sequences of at most
    1,024 tokens spent 48% of the train step's device time in splash (docs/tpu.md). A token attends only
    its own sequence, which starts at most ``window - 1`` positions back, so the local mask gives the same
    numbers and lets splash skip every block further back.
    """
    if not window:
        yield
        return
    module = importlib.import_module(type(model).__module__)
    masks = module.mask_lib

    class Masks:  # what the model's attention reads as ``mask_lib`` while tracing
        MultiHeadMask = masks.MultiHeadMask

        @staticmethod
        def CausalMask(shape: tuple[int, int]) -> Any:  # the name Tunix calls
            return masks.LocalMask(shape, window_size=(window - 1, 0), offset=0)

    module.mask_lib = Masks
    try:
        yield
    finally:
        module.mask_lib = masks
