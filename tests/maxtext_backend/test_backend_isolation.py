"""The Tunix-native path never imports MaxText: its Tunix adapter patches ``jax.lax`` when imported.

Run in a fresh interpreter of the MaxText environment (where MaxText IS importable, so an accidental
import would succeed and be seen): build a packed tiny Tunix qwen3 trainer and check that no ``maxtext``
module was loaded and ``jax.lax.with_sharding_constraint`` / ``top_k`` are still JAX's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys
    import jax
    wsc, top_k = jax.lax.with_sharding_constraint, jax.lax.top_k
    from rljob.api import parse_rljob
    from rljob_trainer import tunix_bridge
    from rljob_trainer.run import startup
    from rljob_trainer.telemetry.progress import StepRecorder

    job = parse_rljob({
        "apiVersion": "rljob.dev/v1alpha1", "kind": "RLJob", "metadata": {"name": "t"},
        "spec": {"image": "img", "model": {"backend": "tunix", "family": "qwen3", "size": "tiny"},
                 "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x2"},
                 "maxPrefillPredictLength": 16, "maxTargetLength": 48,
                 "packing": {"maxSeqTokenPerTpu": 128}, "grpo": {"beta": 0.04, "maxSteps": 1}},
    })
    work = startup.prepare(job)
    run = tunix_bridge.build(job.spec, work.reward_fns, StepRecorder(max_steps=1, packed=True), tokenizer=work.tokenizer)
    print("learner", type(run.learner).__mro__[2].__name__)
    print("maxtext modules", sorted(m for m in sys.modules if m == "maxtext" or m.startswith("maxtext.")))
    print("lax patched", jax.lax.with_sharding_constraint is not wsc or jax.lax.top_k is not top_k)
    """
)


def test_tunix_path_never_imports_maxtext():
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in (".", "operator", "trainer")),
    }
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "learner PackedGRPOLearner" in out.stdout  # the packed Tunix path really was built
    assert "maxtext modules []" in out.stdout, out.stdout
    assert "lax patched False" in out.stdout
