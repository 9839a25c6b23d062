"""MaxText parameters from ``gs://`` (``spec.model.checkpointPath`` = MaxText's ``load_parameters_path``),
served by a real GCS-compatible server (fake-gcs-server, ``tests/trainer/gcs.py``).

MaxText reads the path itself with Orbax: etils ``epath`` over gcsfs (the ``maxtext`` extra's ``gcsfs``)
for files and directories, TensorStore's ``gcs`` kvstore for the arrays (pointed at the emulator by
``build_model``, as ``checkpoint`` does for rljob's own checkpoints; without it the read hangs retrying). rljob only fetches the tokenizer
and data (``sources``); this is the one gs:// read that goes through MaxText.

The checkpoint is written straight to the bucket in the layout MaxText's ``from_pretrained`` reads: an
Orbax PyTree checkpoint at ``<dir>/0/items`` holding ``{"params": {"params": ...}}``, written with the
handler it restores with (``ocp.Checkpointer(ocp.PyTreeCheckpointHandler())``). On gs:// Orbax counts a
directory as finished only with its ``commit_success.txt`` in it; MaxText 0.2.5's own param-only writer
(``checkpointing.save_params_to_path``, Orbax v1) puts that file in ``<dir>/0`` only, so ``from_pretrained``
refuses its output from a bucket ("Found incomplete checkpoint", seen here; docs/maxtext.md). The trainer's
``maxtext_models.build_model`` reads it back: every parameter bit-for-bit, and different from the random
initialisation the same config gives without the checkpoint.
"""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx
from rljob_trainer.models.maxtext import decoders as maxtext_models
from rljob_trainer.models.maxtext.testing import TINY_SPEC
from rljob_trainer.packing.testing import PAD_ID
from rljob_trainer.workload import sources

from tests.trainer.gcs import GcsServer, gcs  # noqa: F401  (the fixture)

TENSORSTORE_ENV = ("TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING")


def params(model) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    return {
        ".".join(map(str, path)): np.asarray(v.value)
        for path, v in nnx.state(model.base, nnx.Param).flat_state()
    }


def build(checkpoint: str | None, seed: int):  # type: ignore[no-untyped-def]
    spec = TINY_SPEC.model_copy(update={"checkpointPath": checkpoint})
    config = maxtext_models.maxtext_config(spec, max_target_length=64, seed=seed)
    return maxtext_models.build_model(config, maxtext_models.make_mesh(config), pad_id=PAD_ID)


@pytest.mark.timeout(900)  # a broken gs:// setup retries instead of failing
def test_params_load_from_gs(gcs: GcsServer, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    import orbax.checkpoint as ocp

    for name in TENSORSTORE_ENV:  # set for the write below; the trainer must set them itself to read
        monkeypatch.delenv(name, raising=False)

    saved = build(None, seed=11)
    want = params(saved)
    gcs.client().create_bucket("models")
    sources.point_tensorstore_at_emulator()
    uri = "gs://models/tiny-qwen3/maxtext/0/items"
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler()) as writer:
        writer.save(uri, {"params": {"params": nnx.state(saved.base, nnx.Param).to_pure_dict()}})
    names = [b.name for b in gcs.client().list_blobs("models")]
    assert "tiny-qwen3/maxtext/0/items/commit_success.txt" in names, names  # Orbax's gs:// "finished" mark

    for name in TENSORSTORE_ENV:
        monkeypatch.delenv(name)
    loaded = params(build(uri, seed=12))
    fresh = params(build(None, seed=12))  # what the same config gives without the checkpoint

    assert loaded.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_array_equal(loaded[key], value, err_msg=key)
    assert any(not np.array_equal(fresh[k], want[k]) for k in want)
