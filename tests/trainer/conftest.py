"""Fixtures shared by the trainer tests: ``gcs``, a real GCS-compatible server (tests/trainer/gcs.py),
``grpo_case``, the packed-vs-unpacked GRPO set-up the packing tests share, and the test process's
persistent compilation cache.

JAX, Flax and Tunix are imported inside the fixture: the tests here that need none of them (the layering
test, the config exits) collect without them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests import jax_cache
from tests.trainer.gcs import gcs  # noqa: F401  (re-exported as a fixture)
from tests.trainer.tolerance import within


@pytest.fixture(scope="session", autouse=True)
def persistent_compilation_cache() -> None:
    """JAX's persistent compilation cache (tests/jax_cache.py) for the programs this test process
    compiles: most of the trainer tests' time is XLA compiling the same small programs every run (a file
    of six packed-head cases: 106 s with an empty cache, 26 s with a warm one, on the 2-core machine). The
    tests here look only at the jit caches' own counts (``_cache_size``) and at JAX's "Compiling" log
    lines, which a program read from the cache writes as a compiled one does."""
    jax_cache.enable()


@dataclass
class GRPOCase:
    """A tiny Tunix model, a GRPO config and one train example, unpacked (``ex``) and packed into rows
    (``packed``, ``plan``): what every "packed equals Tunix unpacked" test compares."""

    model: Any
    cfg: Any
    ex: Any
    packed: Any
    plan: Any

    def loss_and_grads(self, fn: Callable[[Any], Any]) -> tuple[float, Any, list[Any]]:
        """``fn(model) -> (loss, aux)``: the loss, its aux dict and the gradient of every parameter, compiled
        as one program as the learner's train step runs it (op by op, each control-flow op compiles on
        its own on every call: test_packing_grpo and test_packing_splash took 142 s instead of 111)."""
        import jax
        from flax import nnx

        (loss, aux), grads = nnx.jit(nnx.value_and_grad(fn, has_aux=True))(self.model)
        return float(loss), aux, jax.tree.leaves(nnx.state(grads, nnx.Param))

    def assert_loss_and_grads_equal_unpacked(self, packed_fn: Any, aux: tuple[str, ...] = ()) -> None:
        """``packed_fn`` (a packed GRPO loss fn) on the rows == Tunix's ``grpo_loss_fn`` on the unpacked
        example within 1e-5: the loss, the ``aux`` values named, and every gradient (not trivially zero)."""
        from rljob_trainer.packing.testing import EOS_ID, PAD_ID
        from tunix.rl.algo_core import grpo_loss_fn

        cfg = self.cfg
        want_loss, want_aux, want_g = self.loss_and_grads(
            lambda m: grpo_loss_fn(m, self.ex, cfg, pad_id=PAD_ID, eos_id=EOS_ID)
        )
        got_loss, got_aux, got_g = self.loss_and_grads(lambda m: packed_fn(m, self.packed, cfg))
        assert within(abs(got_loss - want_loss), 1e-5)
        for key in aux:
            assert within(abs(float(got_aux[key]) - float(want_aux[key])), 1e-5), key
        assert max(float(np.abs(np.asarray(g)).max()) for g in want_g) > 1e-4  # gradients are not all zero
        for g, w in zip(got_g, want_g, strict=True):
            assert within(np.abs(np.asarray(g) - np.asarray(w)).max(), 1e-5)


@pytest.fixture
def grpo_case() -> Callable[..., GRPOCase]:
    """``grpo_case(family, ex, row=, attention_block=, seed=1, **grpo_overrides)``: a random float32
    ``tiny_model(family, seed)``, ``grpo_config(**grpo_overrides)`` and ``ex`` packed into rows of ``row``
    tokens, checked to share rows (fewer rows than sequences), so the comparison covers packing itself."""
    from rljob_trainer.packing.example import pack_train_example
    from rljob_trainer.packing.testing import PAD_ID, grpo_config, tiny_model

    def make(
        family: str, ex: Any, *, row: int, attention_block: int | None, seed: int = 1, **grpo_overrides: Any
    ) -> GRPOCase:
        packed, plan = pack_train_example(ex, row, pad_id=PAD_ID, attention_block=attention_block)
        assert plan.rows_used < len(ex.prompt_ids), (plan.rows_used, len(ex.prompt_ids))
        return GRPOCase(tiny_model(family, seed=seed), grpo_config(**grpo_overrides), ex, packed, plan)

    return make
