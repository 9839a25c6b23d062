"""Tolerances of the exactness tests on the backend they run on, and a log of the errors measured.

On CPU every exactness test holds to its float32 tolerance (1e-5, 1e-6 for single ops). The TPU tier
(``tests/tpu``) runs the same files on the chip at ``JAX_DEFAULT_MATMUL_PRECISION=highest``, where the
float32 transcendentals (exp, log) are the chip's own approximations and reductions sum in another order:
a log-softmax and its gradient over a vocabulary chain hundreds of them, so errors grow with the values
compared. ``TPU_FACTOR`` widens every tolerance there; docs/tpu.md ("Tolerances on the chip") gives the
per-op errors measured on the chip (``tests/tpu/test_chip_numerics.py`` asserts them each run) and the
largest error each test showed (``RLJOB_TOLERANCE_LOG``), which the factor bounds.
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np

TPU_FACTOR = 20.0
LOG_ENV = "RLJOB_TOLERANCE_LOG"  # a file: one JSON line per comparison (test, error, tolerance)


def tol(cpu: float) -> float:
    """The tolerance to use here for a comparison that holds to ``cpu`` on CPU."""
    return cpu * TPU_FACTOR if jax.default_backend() == "tpu" else cpu


def within(err: float, cpu: float) -> bool:
    """``err < tol(cpu)``, logged to ``$RLJOB_TOLERANCE_LOG`` when set (the TPU tier's record)."""
    err = float(np.asarray(err))
    limit = tol(cpu)
    path = os.environ.get(LOG_ENV)
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(path, "a") as f:
            f.write(json.dumps({"test": test, "err": err, "tol": limit, "cpu_tol": cpu}) + "\n")
    return err < limit
