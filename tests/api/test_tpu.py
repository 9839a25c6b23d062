"""The TPU rules against GKE's published shapes, row by row.

Sources: GKE "Plan TPUs in GKE" and "About TPUs in GKE" (accelerator labels, machine types, topologies);
Cloud TPU "TPU types and topologies" (v4: "AxBxC where A<=B<=C and A, B, C are either all <= 4 or all
integer multiples of 4"; variants 4x4x8, 8x8x16, 12x12x24), "TPU v5p" (shapes 2x2x1 ... 16x16x24, the
largest), "TPU v5e" and "TPU v6e" (2D shapes 1x1 ... 16x16), "TPU7x (Ironwood)" (9216-chip pod, 4-chip
VMs, single-chip tpu7x-standard-1t); xpk's system_characteristics.py for the hosts of each shape.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rljob.api import tpu
from rljob.api.tpu_rules import SINGLE_HOST, chips_per_host_ok

V4, V5E, V5P, V6E, V7X = "tpu-v4-podslice", "tpu-v5-lite-podslice", "tpu-v5p-slice", "tpu-v6e-slice", "tpu7x"

# (accelerator, topology, chipsPerHost override, chips per host, hosts, machine type), all valid on GKE
SHAPES = [
    (V4, "2x2x1", None, 4, 1, "ct4p-hightpu-4t"),
    (V4, "2x2x4", None, 4, 4, "ct4p-hightpu-4t"),
    (V4, "4x4x8", None, 4, 32, "ct4p-hightpu-4t"),
    (V4, "4x4x12", None, 4, 48, "ct4p-hightpu-4t"),
    (V4, "8x8x12", None, 4, 192, "ct4p-hightpu-4t"),
    (V4, "8x8x16", None, 4, 256, "ct4p-hightpu-4t"),
    (V4, "12x12x24", None, 4, 864, "ct4p-hightpu-4t"),
    (V4, "16x16x16", None, 4, 1024, "ct4p-hightpu-4t"),
    (V5E, "1x1", None, 1, 1, "ct5lp-hightpu-1t"),
    (V5E, "2x2", None, 4, 1, "ct5lp-hightpu-4t"),
    (V5E, "2x4", None, 4, 2, "ct5lp-hightpu-4t"),
    (V5E, "2x4", 8, 8, 1, "ct5lp-hightpu-8t"),
    (V5E, "4x8", None, 4, 8, "ct5lp-hightpu-4t"),
    (V5E, "16x16", None, 4, 64, "ct5lp-hightpu-4t"),
    (V5P, "2x2x1", None, 4, 1, "ct5p-hightpu-4t"),
    (V5P, "2x2x2", None, 4, 2, "ct5p-hightpu-4t"),
    (V5P, "2x4x4", None, 4, 8, "ct5p-hightpu-4t"),
    (V5P, "4x4x4", None, 4, 16, "ct5p-hightpu-4t"),
    (V5P, "4x4x12", None, 4, 48, "ct5p-hightpu-4t"),
    (V5P, "4x8x8", None, 4, 64, "ct5p-hightpu-4t"),
    (V5P, "12x12x12", None, 4, 432, "ct5p-hightpu-4t"),
    (V5P, "8x16x16", None, 4, 512, "ct5p-hightpu-4t"),
    (V5P, "16x16x24", None, 4, 1536, "ct5p-hightpu-4t"),
    (V6E, "1x1", None, 1, 1, "ct6e-standard-1t"),
    (V6E, "2x4", 8, 8, 1, "ct6e-standard-8t"),
    (V6E, "4x4", None, 4, 4, "ct6e-standard-4t"),
    (V6E, "16x16", None, 4, 64, "ct6e-standard-4t"),
    (V7X, "1x1x1", None, 1, 1, "tpu7x-standard-1t"),
    (V7X, "2x2x1", None, 4, 1, "tpu7x-standard-4t"),
    (V7X, "2x2x2", None, 4, 2, "tpu7x-standard-4t"),
    (V7X, "4x4x4", None, 4, 16, "tpu7x-standard-4t"),
    (V7X, "4x4x12", None, 4, 48, "tpu7x-standard-4t"),
    (V7X, "8x8x12", None, 4, 192, "tpu7x-standard-4t"),
    (V7X, "16x16x16", None, 4, 1024, "tpu7x-standard-4t"),
    (V7X, "4x4x244", None, 4, 976, "tpu7x-standard-4t"),
    (V7X, "16x16x32", None, 4, 2048, "tpu7x-standard-4t"),
]

# (accelerator, topology) GKE does not offer
NOT_OFFERED = [
    (V4, "2x4"),  # 2D on a 3D generation
    (V4, "1x1x1"),  # single chip only on TPU7x
    (V4, "3x3x3"),
    (V4, "4x4x6"),  # beyond one cube: every axis a multiple of 4
    (V4, "8x4x4"),  # A <= B <= C
    (V4, "16x16x20"),  # more than the 4096-chip v4 pod
    (V5P, "16x16x32"),  # more than 16x16x24, the largest v5p slice
    (V5P, "2x2x3"),
    (V5E, "2x2x1"),  # 3D on a 2D generation
    (V5E, "3x3"),
    (V6E, "4x16"),  # not in the 2D list
    (V7X, "16x24x32"),  # more than the 9216-chip pod
    (V7X, "04x4x4"),  # the node label would never match
]


@pytest.mark.parametrize(("acc", "topo", "override", "per_host", "hosts", "machine"), SHAPES)
def test_documented_shape(acc: str, topo: str, override: int | None, per_host: int, hosts: int, machine: str):
    assert tpu.topology_ok(acc, topo)
    assert tpu.chips_per_host(acc, topo, override) == per_host
    assert tpu.hosts_per_slice(acc, topo, override) == hosts
    assert tpu.machine_type(acc, topo, override) == machine
    assert override is None or override in tpu.allowed_chips_per_host(acc, topo)


@pytest.mark.parametrize(("acc", "topo"), NOT_OFFERED)
def test_shape_gke_does_not_offer(acc: str, topo: str) -> None:
    assert not tpu.topology_ok(acc, topo)


def test_topologies_lists_exactly_what_the_rule_accepts() -> None:
    for gen in tpu.GENERATIONS:
        listed = tpu.topologies(gen.accelerator)
        assert all(tpu.topology_ok(gen.accelerator, t) for t in listed)
        if gen.dims == 3:  # every AxBxC up to the largest slice's edge, accepted iff listed
            edge = max(int(d) for t in listed for d in t.split("x"))
            grid = {f"{a}x{b}x{c}" for a in range(1, 17) for b in range(1, 17) for c in range(1, edge + 1)}
            assert {t for t in grid if tpu.topology_ok(gen.accelerator, t)} == {
                t for t in listed if t in grid
            }


def test_single_host_set_matches_host_math() -> None:
    """The CEL multislice rule uses a topology list; it must say the same as hosts_per_slice."""
    for gen in tpu.GENERATIONS:
        for topo in tpu.topologies(gen.accelerator):
            single = tpu.hosts_per_slice(gen.accelerator, topo) == 1
            assert single == (topo in SINGLE_HOST), (gen.accelerator, topo)


def test_chips_per_host_rule_matches_table() -> None:
    for gen in tpu.GENERATIONS:
        for topo in tpu.topologies(gen.accelerator):
            for value in (1, 4, 8):
                t = SimpleNamespace(accelerator=gen.accelerator, topology=topo, chipsPerHost=value)
                assert chips_per_host_ok(t) == (value in tpu.allowed_chips_per_host(gen.accelerator, topo))
