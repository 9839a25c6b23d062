"""JAX's persistent compilation cache, on by default: a start after the first loads its programs.

Why: every start pays XLA compilation in full (Qwen3-0.6B on the v5e chip: a 165-230-s first step; the
CPU demo: ~50 of its 60 s), and on GKE every restart pays it on every host. With the cache a restart
reads the compiled programs back (the chip: 64 s instead of 230 s; the demo run: 13.7 s instead of 43 s,
docs/trainer.md "Measured"). JAX keys every entry by the program and the compiler, so a changed model,
shape or JAX version compiles anew and never loads a stale program.

Where (``directory``): ``spec.compilationCache.directory``; unset, ``compilation-cache/`` under the
checkpoint directory (shared by every host and restart, like the checkpoints); without one, the user's
cache directory. ``enable`` turns it on after writing a probe file there through ``etils.epath``, as JAX
opens it (``gs://`` through gcsfs): a directory it cannot create or write (any storage error) is a warning
and the run goes on without a cache, where JAX would raise in the middle of the first compilation. JAX's
own switch ``JAX_ENABLE_COMPILATION_CACHE=false`` turns it off (the test suite does: tests/conftest.py).
Once on, JAX only warns when an entry cannot be read.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

from rljob.api.spec import RLJobSpec

log = logging.getLogger(__name__)
SUBDIR = "compilation-cache"
# JAX's default (1 s) skips programs that compile faster; a start compiles dozens of sub-second ones
# (the sampler's, the demo's), which together are most of a small job's start.
MIN_COMPILE_SECONDS = 0.0


def directory(spec: RLJobSpec, environ: dict[str, str] | None = None) -> str | None:
    """The cache directory of this job (None: the cache is off). Pure: no JAX, no file system."""
    env = os.environ if environ is None else environ
    cache = spec.compilationCache
    if not cache.enabled:
        return None
    if cache.directory:
        return cache.directory
    if spec.checkpoint.directory:
        return f"{spec.checkpoint.directory.rstrip('/')}/{SUBDIR}"
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return str(Path(base) / "rljob" / "jax")


def enable(path: str | None) -> str | None:
    """Turn JAX's persistent cache on at ``path`` (before the first compilation); returns the directory in
    use, or None (off, JAX's switch off, or a directory that cannot be written: a warning)."""
    if path is None:
        return None
    import jax

    if (
        not jax.config.jax_enable_compilation_cache
    ):  # JAX_ENABLE_COMPILATION_CACHE=false: JAX's own off switch
        return None
    from etils import epath  # what JAX's cache opens its directory with (gs:// through gcsfs)

    try:
        folder = epath.Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".rljob-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except Exception as exc:  # any storage error (OSError, a GCS client's): JAX would raise it mid-compile
        log.warning("compilation cache off: cannot write %s (%s); every start compiles in full", path, exc)
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path
