"""The run's lifecycle: what starts, carries and ends one trainer process.

Here: the entry point (``main``: argparse, exit codes, ``train``), its options (``options``, argparse only),
the checks and fetches before JAX (``startup``), quiet CPU fallback (``platforms``), multi-host start
(``distributed``), SIGTERM (``sigterm``) and Orbax checkpoints (``checkpoint``).

The top layer of the trainer: it may import every other room (``workload``, ``models``, ``telemetry``),
``tunix_bridge`` and ``packing``; nothing outside ``run`` imports it (``rljob_trainer.__main__`` aside, and
the CLI, which calls ``main``). tests/trainer/test_layers.py checks this.
"""
