"""The multislice mesh on real JAX devices: ``dp`` spans the slices, fsdp/tp stay inside one slice.

Eight CPU devices stand for 2 slices x 4 devices. A CPU device has no ``slice_index``, so slice-major order
is device order (``tunix_bridge.slice_major``; its TPU ordering is tested with fake devices in
test_config_bridge.py): slice 0 = devices 0-3, slice 1 = devices 4-7, whatever order ``jax.devices()``
lists them in. Several devices need XLA_FLAGS before JAX starts, hence the subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, random
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from rljob_trainer import tunix_bridge

    real = jax.devices()
    assert len(real) == 8
    shuffled = random.Random(0).sample(real, len(real))
    tunix_bridge.jax.devices = lambda: shuffled  # listed out of slice order

    mesh = tunix_bridge.make_mesh(2)
    axes = tunix_bridge.data_axes(mesh)
    batch = jax.device_put(np.arange(16), NamedSharding(mesh, P(axes)))
    rows = {int(s.device.id): np.asarray(s.data).tolist() for s in batch.addressable_shards}
    print(json.dumps({
        "axis_names": list(mesh.axis_names),
        "shape": dict(mesh.shape),
        "slices": [sorted(int(d.id) for d in mesh.devices[i].flat) for i in range(mesh.shape.get("dp", 1))],
        "data_axes": list(axes),
        "rows": rows,
        "single": list(tunix_bridge.make_mesh(1).axis_names),
    }))
    """
)


def test_multislice_mesh_data_axis_spans_slices_and_model_axes_stay_inside_one() -> None:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["axis_names"] == ["dp", "fsdp", "tp"] and out["shape"] == {"dp": 2, "fsdp": 4, "tp": 1}
    # each dp index is one whole slice: fsdp/tp collectives never leave it
    assert out["slices"] == [[0, 1, 2, 3], [4, 5, 6, 7]], out
    # the batch is split over dp first: slice 0 holds rows 0-7, slice 1 rows 8-15
    assert out["data_axes"] == ["dp", "fsdp"]
    assert sorted(r for d in range(4) for r in out["rows"][str(d)]) == list(range(8)), out["rows"]
    assert sorted(r for d in range(4, 8) for r in out["rows"][str(d)]) == list(range(8, 16)), out["rows"]
    assert out["single"] == ["fsdp", "tp"]
