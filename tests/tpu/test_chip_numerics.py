"""What the chip's float32 arithmetic contributes to the exactness tests' errors, measured each run.

tests/trainer/tolerance.py derives the chip's tolerances from these per-op errors (against float64 on the
host, of the same float32 inputs): a float32 matmul at ``highest`` precision (the precision the tier runs
the exactness tests at) and at the default, exp, log, and a log-softmax over a vocabulary. The figures
go to docs/tpu.md ("Tolerances on the chip").
"""

from __future__ import annotations

import json

from tests.tpu import chip
from tests.trainer import tolerance

SCRIPT = r"""
import json
import jax, jax.numpy as jnp, numpy as np
rng = np.random.default_rng(0)
out = {"device": str(jax.devices()[0].device_kind), "backend": jax.default_backend()}
# Inputs rounded to float32 first: the references are float64 results of the same float32 inputs, so the
# errors are the chip's operations' own, not the inputs' rounding.
f32 = lambda v: np.asarray(v, np.float32).astype(np.float64)
a, b = f32(rng.normal(size=(256, 512))), f32(rng.normal(size=(512, 256)))
ref = a @ b
for precision in ("highest", "default"):
    got = np.asarray(jnp.matmul(jnp.float32(a), jnp.float32(b), precision=precision), np.float64)
    out[f"matmul_{precision}_rel"] = float(np.abs(got - ref).max() / np.abs(ref).max())
x = f32(rng.uniform(-30, 5, size=1 << 16))
out["exp_rel"] = float(np.max(np.abs(np.asarray(jax.jit(jnp.exp)(jnp.float32(x)), np.float64) / np.exp(x) - 1)))
y = f32(rng.uniform(1e-3, 1e3, size=1 << 16))
out["log_abs"] = float(np.max(np.abs(np.asarray(jax.jit(jnp.log)(jnp.float32(y)), np.float64) - np.log(y))))
logits = f32(rng.normal(size=(512, 256)) * 3)
want = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
got = np.asarray(jax.jit(jax.nn.log_softmax)(jnp.float32(logits)), np.float64)
out["log_softmax_abs"] = float(np.abs(got - want).max())
out["float32_eps"] = float(np.finfo(np.float32).eps)
print(json.dumps(out))
"""


def test_chip_float32_errors_are_what_the_tolerances_assume(record) -> None:
    res = chip.run(["python", "-c", SCRIPT], timeout=300)
    assert res["rc"] == 0, res["stderr_tail"]
    got = json.loads(res["stdout"].strip().splitlines()[-1])
    record("chip_numerics", got)
    assert got["backend"] == "tpu"
    eps = got["float32_eps"]
    # What tests/trainer/tolerance.py assumes of the chip: highest-precision matmuls as exact as the CPU's,
    # exp and log within its constants. The default precision (one bf16 pass) is not, hence "highest".
    assert got["matmul_highest_rel"] < 16 * eps, got
    assert got["exp_rel"] < tolerance.TPU_EXP_REL, got
    assert got["log_abs"] < tolerance.TPU_LOG_ABS and got["log_softmax_abs"] < tolerance.TPU_LOG_ABS, got
