"""Settings every test process (and every trainer it starts) shares.

``JAX_ENABLE_COMPILATION_CACHE=false``: the trainer turns JAX's persistent compilation cache on by default
(``rljob_trainer/run/compile_cache.py``, in the user's cache directory for a local run). Shared by every
trainer the suite starts, it would make a test's outcome depend on which ran before it: the tests that
watch a first step compile (the console's "compiling", the ``compiled`` step label, goodput's compile
time) would see programs loaded instead. ``tests/trainer/test_compile_cache.py`` turns it on in its own
cache directory.
"""

import os

os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
