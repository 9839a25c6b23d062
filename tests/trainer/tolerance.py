"""Tolerances of the exactness tests on the backend they run on, and a log of the errors measured.

On CPU every exactness test holds to its float32 tolerance (1e-5, 1e-6 for single ops). The TPU tier
(``tests/tpu``) runs the same files on the chip at ``JAX_DEFAULT_MATMUL_PRECISION=highest``. Measured
there (``tests/tpu/test_chip_numerics.py`` re-measures and checks these each run; docs/tpu.md,
"Tolerances on the chip"): a float32 matmul at ``highest`` is as exact as the CPU's (1.3e-7 of the
largest value); exp is within 5.3e-6 relative; **log is within only 1.1e-4 absolute**, and a log-softmax
inherits it (9.9e-5). So:

* ``TPU_FACTOR``: where both sides of a comparison run the same transcendentals in the same places
  (packed vs unpacked forwards, head at completions vs every column), their errors cancel; the largest
  error on the chip was 0.8 of the CPU tolerance. Twice the CPU tolerance leaves room, nothing more.
* ``log_paths_differ=True``: where the two sides take logs of different sums (the head's hand-written
  backward against autodiff of ``lax.map``), each side carries its own log error: up to
  ``TPU_LOG_ABS`` in every log-sum-exp, and through ``softmax = exp(logit - lse)`` into every gradient
  term, times weights of up to ~3 in those tests: ``4 * TPU_LOG_ABS`` more (measured: 2.0e-4).
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np

TPU_FACTOR = 2.0
TPU_LOG_ABS = 1.1e-4  # the chip's float32 log, absolute error (measured 1.06e-4 over [1e-3, 1e3])
TPU_EXP_REL = 1e-5  # the chip's float32 exp, relative error (measured 5.3e-6)
LOG_ENV = "RLJOB_TOLERANCE_LOG"  # a file: one JSON line per comparison (test, error, tolerance)


def tol(cpu: float, *, log_paths_differ: bool = False) -> float:
    """The tolerance to use here for a comparison that holds to ``cpu`` on CPU (see the module doc)."""
    if jax.default_backend() != "tpu":
        return cpu
    return cpu * TPU_FACTOR + (4 * TPU_LOG_ABS if log_paths_differ else 0.0)


def within(err: float, cpu: float, *, log_paths_differ: bool = False) -> bool:
    """``err < tol(cpu, ...)``, logged to ``$RLJOB_TOLERANCE_LOG`` when set (the TPU tier's record)."""
    err = float(np.asarray(err))
    limit = tol(cpu, log_paths_differ=log_paths_differ)
    path = os.environ.get(LOG_ENV)
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(path, "a") as f:
            f.write(json.dumps({"test": test, "err": err, "tol": limit, "cpu_tol": cpu}) + "\n")
    return err < limit
