"""Tunix's splash (Pallas flash) attention on packed rows: the block that divides a row, the model's flash
path switched on while a call traces, and the mask narrowed to the longest sequence (the window).
Used by ``adapter`` (the packed forward) and ``learner`` (the block chosen at start).

Thread by thread: Tunix's model reads ``config.use_flash_attention`` (and its module's ``mask_lib``) when a
call traces, and the rollout shares the actor's model, so a switch on the shared config would reach every
thread tracing at that moment. On the chip (2026-12-07) the train step traced by ``prewarm``'s thread beside
the first rollout turned flash on for the sampler's prefill, which then failed (``q_block_size=1024 should
divide q_seq_len=384``). So the switch is per thread: the config's two flash fields and the mask read the
calling thread's setting (``install``), and ``flash_attention`` sets it for its own thread only.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from typing import Any

# Splash needs multiples of 128. 512 first, not Tunix's default 1024: with the mask causal within the longest
# sequence (``flash_attention``'s window W) a query block of b reads about W + b keys a token, and on the
# chip at the v5e example (rows of 8,192, W = 1,024) block 512 trained 4.5% faster than 1,024 (5.08 / 5.47 s
# against 5.33 / 5.70 s at steps 2 / 3, 2026-12-07, docs/tpu.md); blocks below 512 were not measured.
SPLASH_BLOCKS = (512, 256, 128)
FLASH_FIELDS = ("use_flash_attention", "flash_attention_block_size")

_LOCAL = threading.local()  # .flash: (block, window) while a packed call traces in this thread
_INSTALL = threading.Lock()
_CONFIG_CLASSES: dict[type, type] = {}


def splash_block(row_len: int) -> int:
    """The first of ``SPLASH_BLOCKS`` dividing a packed row (query and key block); rows are multiples of
    128 (API rule)."""
    for block in SPLASH_BLOCKS:
        if row_len % block == 0:
            return block
    raise ValueError(
        f"spec.packing.maxSeqTokenPerTpu={row_len} must be a multiple of 128 for splash attention"
    )


def _flash_here() -> tuple[int, int] | None:
    """(block, window) if the calling thread is inside ``flash_attention``, else None."""
    return getattr(_LOCAL, "flash", None)


def _thread_config_class(base: type) -> type:
    """``base`` (a Tunix ``ModelConfig``, a slots dataclass) whose flash fields read the calling thread's
    setting inside ``flash_attention`` and the stored values elsewhere; writes go to the stored values."""
    if base not in _CONFIG_CLASSES:
        members = {name: base.__dict__[name] for name in FLASH_FIELDS}  # the dataclass's slot descriptors

        def field(index: int, stored: Any) -> property:
            def read(self: Any) -> Any:
                flash = _flash_here()
                return stored.__get__(self, base) if flash is None else (True, flash[0])[index]

            return property(read, stored.__set__)

        fields = {name: field(i, members[name]) for i, name in enumerate(FLASH_FIELDS)}
        _CONFIG_CLASSES[base] = type(base.__name__, (base,), {"__slots__": (), **fields})
    return _CONFIG_CLASSES[base]


class _ThreadMasks:
    """Stands in for a model module's ``mask_lib``: ``CausalMask`` is causal within the calling thread's
    window inside ``flash_attention``, Tunix's causal mask elsewhere."""

    def __init__(self, masks: Any) -> None:
        self.masks = masks

    def __getattr__(self, name: str) -> Any:
        return getattr(self.masks, name)

    def CausalMask(self, shape: tuple[int, int]) -> Any:  # the name Tunix calls
        flash = _flash_here()
        if flash is None or not flash[1]:
            return self.masks.CausalMask(shape)
        return self.masks.LocalMask(shape, window_size=(flash[1] - 1, 0), offset=0)


def install(model: Any) -> None:
    """Make ``model``'s flash switch per thread (idempotent; ``flash_attention`` calls it). Safe while
    another thread traces: before the swap it reads the stored values, after it the same values."""
    with _INSTALL:
        cfg = model.config
        if type(cfg) not in _CONFIG_CLASSES.values():
            cfg.__class__ = _thread_config_class(type(cfg))
        module = importlib.import_module(type(model).__module__)
        if not isinstance(module.mask_lib, _ThreadMasks):
            module.mask_lib = _ThreadMasks(module.mask_lib)


@contextlib.contextmanager
def flash_attention(model: Any, block: int, window: int = 0) -> Iterator[None]:
    """Tunix's flash (splash) path on for calls this thread traces inside (the model reads it while a
    jitted call traces), other threads unaffected.

    ``window`` > 0 (the longest sequence a row can hold): Tunix's static causal splash mask becomes causal
    within the last ``window`` positions. Why: splash takes a static mask and uses the segment ids only
    to zero scores, so on a packed row it computes every causal block of the row: on the chip, rows of
    8,192 holding ~9 sequences of at most 1,024 tokens spent 48% of the train step's device time in
    splash (docs/tpu.md). A token attends only its own sequence, which starts at most ``window - 1``
    positions back, so the local mask gives the same numbers and lets splash skip every block further back.
    """
    install(model)
    saved = _flash_here()
    _LOCAL.flash = (block, window)
    try:
        yield
    finally:
        _LOCAL.flash = saved
