"""The TPU table against GKE's published shapes (gke-tpu-jobset reference), row by row."""

from __future__ import annotations

import pytest

from rljob.api import tpu
from rljob.api.rules import _SINGLE_HOST

# (accelerator, topology, chipsPerHost override, chips per host, hosts, machine type)
SHAPES = [
    ("tpu-v4-podslice", "2x2x1", None, 4, 1, "ct4p-hightpu-4t"),
    ("tpu-v4-podslice", "2x2x4", None, 4, 4, "ct4p-hightpu-4t"),
    ("tpu-v5-lite-podslice", "2x2", None, 4, 1, "ct5lp-hightpu-4t"),
    ("tpu-v5-lite-podslice", "2x4", None, 4, 2, "ct5lp-hightpu-4t"),
    ("tpu-v5-lite-podslice", "2x4", 8, 8, 1, "ct5lp-hightpu-8t"),
    ("tpu-v5-lite-podslice", "4x8", None, 4, 8, "ct5lp-hightpu-4t"),
    ("tpu-v5p-slice", "2x2x1", None, 4, 1, "ct5p-hightpu-4t"),
    ("tpu-v5p-slice", "4x4x4", None, 4, 16, "ct5p-hightpu-4t"),
    ("tpu-v6e-slice", "1x1", None, 1, 1, "ct6e-standard-1t"),
    ("tpu-v6e-slice", "4x4", None, 4, 4, "ct6e-standard-4t"),
    ("tpu-v6e-slice", "16x16", None, 4, 64, "ct6e-standard-4t"),
    ("tpu7x", "2x2x2", None, 4, 2, "tpu7x-standard-4t"),
    ("tpu7x", "4x4x4", None, 4, 16, "tpu7x-standard-4t"),
]


@pytest.mark.parametrize(("acc", "topo", "override", "per_host", "hosts", "machine"), SHAPES)
def test_shape(acc: str, topo: str, override: int | None, per_host: int, hosts: int, machine: str) -> None:
    assert tpu.chips_per_host(acc, topo, override) == per_host
    assert tpu.hosts_per_slice(acc, topo, override) == hosts
    assert tpu.machine_type(acc, topo, override) == machine
    assert override is None or override in tpu.allowed_chips_per_host(acc, topo)


def test_single_host_set_matches_host_math() -> None:
    """The CEL multislice rule uses a topology list; it must say the same as hosts_per_slice."""
    for gen in tpu.GENERATIONS:
        for topo in gen.topologies:
            single = tpu.hosts_per_slice(gen.accelerator, topo) == 1
            assert single == (topo in _SINGLE_HOST), (gen.accelerator, topo)


def test_chips_per_host_rule_matches_table() -> None:
    from types import SimpleNamespace

    from rljob.api.rules import _chips_per_host_ok

    for gen in tpu.GENERATIONS:
        for topo in gen.topologies:
            for value in (1, 4, 8):
                t = SimpleNamespace(accelerator=gen.accelerator, topology=topo, chipsPerHost=value)
                assert _chips_per_host_ok(t) == (value in tpu.allowed_chips_per_host(gen.accelerator, topo))
