"""The trainer's command-line options, shared by ``python -m rljob_trainer`` and ``rljob train``.

A module of its own with nothing but argparse, so ``rljob train --help`` lists them without importing
the trainer (NumPy, JAX, Tunix).
"""

from __future__ import annotations

import argparse


def add_train_options(p: argparse.ArgumentParser) -> None:
    """Overrides of the RLJob (re-validated through the API model) and console settings."""
    p.add_argument("--max-steps", type=int, metavar="N", help="override spec.grpo.maxSteps")
    p.add_argument("--seed", type=int, metavar="N", help="override spec.grpo.seed")
    p.add_argument("--no-packing", action="store_true", help="override spec.packing.maxSeqTokenPerTpu to 0")
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="override spec.metrics.port; 0 picks a free port (for local runs next to another trainer)",
    )
    p.add_argument(
        "--workdir",
        metavar="DIR",
        help="local directory for run outputs (checkpoints when spec.checkpoint has no directory); "
        "default: none",
    )
    p.add_argument(
        "--log-every", type=int, default=1, metavar="N", help="print progress every N steps (default 1)"
    )
    p.add_argument("--quiet", action="store_true", help="no per-step progress output")
