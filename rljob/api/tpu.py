"""GKE TPU system characteristics: one table, and the slice math derived from it.

The table is the single source for everything TPU-shaped in rljob: the accelerator enum of the RLJob
model, the topology rules emitted as CEL into the CRD, and the renderer's chips-per-host and
hosts-per-slice. Facts are from GKE's TPU docs and xpk's ``system_characteristics.py``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

RESERVED_TPU_PORTS: tuple[int, ...] = (8080, 8431, 8471, 8476, 8482)
"""Ports the TPU runtime uses on the host network: trainer ports must keep off them (8482: JAX's
coordinator on GKE TPU, ``jax/_src/clusters/cloud_tpu_cluster.py``)."""


@dataclass(frozen=True)
class Generation:
    """One TPU generation as GKE labels it, and GKE's documented topology rule for it.

    2D generations (v5e, v6e): GKE documents a closed list of shapes, ``shapes``. 3D generations (v4, v5p,
    TPU7x): ``AxBxC`` with ``A <= B <= C``, all multiples of 4 (whole 4x4x4 cubes and their multiples
    along each axis), at most ``max_chips`` chips, plus the small shapes below one cube, ``shapes`` (GKE:
    "Plan TPUs in GKE"; Cloud TPU: "TPU types and topologies", "v4 topology is AxBxC where A<=B<=C and
    A, B, C are either all <= 4 or all integer multiples of 4"; the largest slices: v4 pod 4096 chips,
    v5p 16x16x24 = 6144 chips, TPU7x pod 9216 chips).
    """

    name: str
    accelerator: str  # value of the node label cloud.google.com/gke-tpu-accelerator
    dims: int  # 2 for AxB topologies, 3 for AxBxC
    machine_prefix: str  # GKE machine type without the chip-count suffix
    shapes: tuple[str, ...]  # 2D: every topology; 3D: the ones below a 4x4x4 cube
    max_chips: int  # 3D: chips in the largest slice (0 for 2D: the list is closed)
    eight_chip_host: bool  # whether a single-host 8-chip machine type exists (topology 2x4 only)
    peak_bf16_flops: float  # peak dense bf16 FLOP/s of one chip, from Cloud TPU's page for the generation
    peak_source: str  # that page (its "Peak compute per chip (bf16)" row): the trainer's MFU divides by it


_2D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
_SMALL_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")
CUBE_EDGE = 4
"""3D topologies from one cube up are multiples of this along every axis."""

_DOCS = "https://cloud.google.com/tpu/docs/"
GENERATIONS: tuple[Generation, ...] = (
    Generation("v4", "tpu-v4-podslice", 3, "ct4p-hightpu", _SMALL_3D, 4096, False, 275e12, _DOCS + "v4"),
    Generation("v5e", "tpu-v5-lite-podslice", 2, "ct5lp-hightpu", _2D, 0, True, 197e12, _DOCS + "v5e"),
    Generation("v5p", "tpu-v5p-slice", 3, "ct5p-hightpu", _SMALL_3D, 6144, False, 459e12, _DOCS + "v5p"),
    Generation("v6e", "tpu-v6e-slice", 2, "ct6e-standard", _2D, 0, True, 918e12, _DOCS + "v6e"),
    Generation(
        "v7x", "tpu7x", 3, "tpu7x-standard", ("1x1x1", *_SMALL_3D), 9216, False, 2307e12, _DOCS + "tpu7x"
    ),
)
BY_ACCELERATOR: dict[str, Generation] = {g.accelerator: g for g in GENERATIONS}
ACCELERATORS: tuple[str, ...] = tuple(BY_ACCELERATOR)
CUBE_PATTERN = r"^[1-9][0-9]*x[1-9][0-9]*x[1-9][0-9]*$"


def _cube_multiple(gen: Generation, topology: str) -> bool:
    """The 3D rule from one cube up: A <= B <= C, all multiples of 4, at most ``max_chips`` chips."""
    if gen.dims != 3 or re.fullmatch(CUBE_PATTERN, topology) is None:
        return False
    a, b, c = (int(d) for d in topology.split("x"))
    return (
        a % CUBE_EDGE == 0 and b % CUBE_EDGE == 0 and c % CUBE_EDGE == 0 and a <= b <= c
    ) and a * b * c <= gen.max_chips


def topology_ok(accelerator: str, topology: str) -> bool:
    """Whether GKE offers this topology for this accelerator (the rule in ``Generation``'s docstring)."""
    gen = BY_ACCELERATOR[accelerator]
    return topology in gen.shapes or _cube_multiple(gen, topology)


def topologies(accelerator: str) -> tuple[str, ...]:
    """Every topology ``topology_ok`` accepts for this accelerator, smallest first (for tests and docs)."""
    gen = BY_ACCELERATOR[accelerator]
    out = list(gen.shapes)
    if gen.dims == 3:
        n = gen.max_chips // CUBE_EDGE**3
        for a in range(1, n + 1):
            for b in range(a, n // a + 1):
                for c in range(b, n // (a * b) + 1):
                    out.append(f"{a * CUBE_EDGE}x{b * CUBE_EDGE}x{c * CUBE_EDGE}")
    return tuple(sorted(out, key=lambda t: (chips(t), t)))


def chips(topology: str) -> int:
    """Chips in one slice: the product of the topology's dimensions."""
    return math.prod(int(d) for d in topology.split("x"))


def default_chips_per_host(topology: str) -> int:
    """Chips per host GKE uses when nothing more is said: 1 for a single chip, else 4.

    The 8-chip single-host machines (``*-8t``, topology ``2x4`` on v5e/v6e) share their labels with the
    2-host ``*-4t`` form, so they are only chosen when the RLJob says ``chipsPerHost: 8``.
    """
    return 1 if chips(topology) == 1 else 4


def allowed_chips_per_host(accelerator: str, topology: str) -> tuple[int, ...]:
    """Values of ``spec.tpu.chipsPerHost`` that describe a real machine type for this slice."""
    gen = BY_ACCELERATOR[accelerator]
    if gen.eight_chip_host and topology == "2x4":
        return (4, 8)
    return (default_chips_per_host(topology),)


def chips_per_host(accelerator: str, topology: str, override: int | None = None) -> int:
    """Chips each host of the slice has, i.e. the pod's ``google.com/tpu`` request."""
    return override if override is not None else default_chips_per_host(topology)


def hosts_per_slice(accelerator: str, topology: str, override: int | None = None) -> int:
    """Hosts (pods) in one slice: chips / chips per host."""
    return chips(topology) // chips_per_host(accelerator, topology, override)


def machine_type(accelerator: str, topology: str, override: int | None = None) -> str:
    """GKE machine type of the slice's hosts, e.g. ``ct5lp-hightpu-4t``."""
    gen = BY_ACCELERATOR[accelerator]
    return f"{gen.machine_prefix}-{chips_per_host(accelerator, topology, override)}t"
