"""The test suite's own persistent compilation cache: where the programs that tests compile are kept
across runs (LRU, at most ``MAX_BYTES``), for the test process (tests/trainer/conftest.py) and the trainer
runs that do not watch their first step compile (tests/trainer/sharded_run.py). The trainers other tests
start as processes keep it off (tests/conftest.py). JAX keys each entry by the program, the compiler and its options,
so a changed program compiles anew."""

from __future__ import annotations

import os
from pathlib import Path

DIRECTORY = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rljob" / "test-jax"
MAX_BYTES = 2 << 30


def enable() -> None:
    """Turn it on in this process's JAX, whatever it compiled before, and open it now: JAX decides once,
    at a process's first compilation, whether and where it caches (``reset_cache`` forgets that choice),
    and a trainer's own ``compile_cache.enable`` later in the process then changes nothing."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(DIRECTORY))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    compilation_cache.reset_cache()
    jax.jit(lambda x: x + 1)(0).block_until_ready()  # the first compilation opens the cache here
