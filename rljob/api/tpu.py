"""GKE TPU system characteristics: one table, and the slice math derived from it.

The table is the single source for everything TPU-shaped in rljob: the accelerator enum of the RLJob
model, the topology rules emitted as CEL into the CRD, and the renderer's chips-per-host and
hosts-per-slice. Facts are from GKE's TPU docs and xpk's ``system_characteristics.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RESERVED_TPU_PORTS: tuple[int, ...] = (8080, 8431, 8471, 8476, 8482)
"""Ports the TPU runtime uses on the host network: trainer ports must keep off them (8482: JAX's
coordinator on GKE TPU, ``jax/_src/clusters/cloud_tpu_cluster.py``)."""


@dataclass(frozen=True)
class Generation:
    """One TPU generation as GKE labels it."""

    name: str
    accelerator: str  # value of the node label cloud.google.com/gke-tpu-accelerator
    dims: int  # 2 for AxB topologies, 3 for AxBxC
    machine_prefix: str  # GKE machine type without the chip-count suffix
    topologies: tuple[str, ...]  # topologies GKE offers for this generation
    eight_chip_host: bool  # whether a single-host 8-chip machine type exists (topology 2x4 only)


_2D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16")

GENERATIONS: tuple[Generation, ...] = (
    Generation("v4", "tpu-v4-podslice", 3, "ct4p-hightpu", (*_3D, "16x16x16"), False),
    Generation("v5e", "tpu-v5-lite-podslice", 2, "ct5lp-hightpu", _2D, True),
    Generation("v5p", "tpu-v5p-slice", 3, "ct5p-hightpu", (*_3D, "16x16x16", "16x16x24"), False),
    Generation("v6e", "tpu-v6e-slice", 2, "ct6e-standard", _2D, True),
    Generation("v7x", "tpu7x", 3, "tpu7x-standard", _3D, False),
)
BY_ACCELERATOR: dict[str, Generation] = {g.accelerator: g for g in GENERATIONS}
ACCELERATORS: tuple[str, ...] = tuple(BY_ACCELERATOR)


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


def multi_host_topologies(accelerator: str) -> tuple[str, ...]:
    """Topologies of this generation whose slices span several hosts at the default chips per host."""
    gen = BY_ACCELERATOR[accelerator]
    return tuple(t for t in gen.topologies if chips(t) > default_chips_per_host(t))
