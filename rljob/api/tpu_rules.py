"""Cross-field rules of ``spec.tpu`` (the slice), in Python and CEL side by side: the topologies GKE
offers per generation, chips per host, and which slices can be multislice. The TPU table they derive from
is ``tpu.py``; ``rules.py`` gathers these with the others.
"""

from __future__ import annotations

from typing import Any

from rljob.api import tpu
from rljob.api.rule import Rule, cel_list


def _dim(i: int) -> str:
    return f"int(self.topology.split('x')[{i}])"


def _topology_rule(gen: tpu.Generation) -> Rule:
    """GKE's rule for one generation (``tpu.Generation``): its listed shapes, and for 3D generations any
    ``AxBxC`` with A <= B <= C, all multiples of 4, up to ``max_chips`` chips.

    The CEL uses ``split`` (Kubernetes' strings extension); the ``matches`` guard comes first, and CEL's
    ``&&`` is false as soon as one side is, so a 2D topology never reaches the ``int`` calls.
    """
    listed = f"self.topology in {cel_list(gen.shapes)}"
    if gen.dims == 2:
        message = f"for {gen.accelerator} must be one of {', '.join(gen.shapes)}"
        cel = f"self.accelerator != '{gen.accelerator}' || {listed}"
    else:
        e = tpu.CUBE_EDGE
        message = (
            f"for {gen.accelerator} must be one of {', '.join(gen.shapes)}, or AxBxC with A <= B <= C, "
            f"all multiples of {e}, at most {gen.max_chips} chips"
        )
        cube = " && ".join(
            [
                f"self.topology.matches('{tpu.CUBE_PATTERN}')",
                *(f"{_dim(i)} % {e} == 0" for i in range(3)),
                f"{_dim(0)} <= {_dim(1)}",
                f"{_dim(1)} <= {_dim(2)}",
                f"{_dim(0)} * {_dim(1)} * {_dim(2)} <= {gen.max_chips}",
            ]
        )
        cel = f"self.accelerator != '{gen.accelerator}' || {listed} || ({cube})"
    return Rule(
        scope=("spec", "tpu"),
        field="topology",
        message=message,
        cel=cel,
        check=lambda t, g=gen: t.accelerator != g.accelerator or tpu.topology_ok(g.accelerator, t.topology),
    )


EIGHT_CHIP = tuple(g.accelerator for g in tpu.GENERATIONS if g.eight_chip_host)
SINGLE_HOST = tuple(
    sorted({t for g in tpu.GENERATIONS for t in g.shapes if tpu.hosts_per_slice(g.accelerator, t) == 1})
)
"""Single-host topologies at the default chips per host (every shape from one cube up is multi-host)."""
SINGLE_CHIP = tuple(t for t in SINGLE_HOST if tpu.chips(t) == 1)


def chips_per_host_ok(t: Any) -> bool:
    # Stated like the CEL; on valid topologies it equals tpu.allowed_chips_per_host (tests/api/test_tpu.py).
    return (
        t.chipsPerHost is None
        or t.chipsPerHost == (1 if t.topology in SINGLE_CHIP else 4)
        or (t.chipsPerHost == 8 and t.topology == "2x4" and t.accelerator in EIGHT_CHIP)
    )


def multislice_ok(t: Any) -> bool:
    # Stated like the CEL (which cannot multiply topology dimensions); equal to "hosts > 1" on valid slices.
    return t.slices == 1 or (t.topology not in SINGLE_HOST and t.chipsPerHost != 8)


TPU_RULES: tuple[Rule, ...] = (
    *(_topology_rule(g) for g in tpu.GENERATIONS),
    Rule(
        scope=("spec", "tpu"),
        field="chipsPerHost",
        message=f"must match the slice: 1 for topology {' or '.join(SINGLE_CHIP)}, 8 only for 2x4 on "
        f"{' or '.join(EIGHT_CHIP)}, else 4",
        cel="!has(self.chipsPerHost) || "
        f"self.chipsPerHost == (self.topology in {cel_list(SINGLE_CHIP)} ? 1 : 4) || "
        f"(self.chipsPerHost == 8 && self.topology == '2x4' && self.accelerator in {cel_list(EIGHT_CHIP)})",
        check=chips_per_host_ok,
    ),
    Rule(
        scope=("spec", "tpu"),
        field="slices",
        message="multislice (slices > 1) needs a multi-host slice; "
        f"{', '.join(SINGLE_HOST)} and 8-chip hosts are single-host",
        cel=f"self.slices == 1 || (!(self.topology in {cel_list(SINGLE_HOST)}) && "
        "!(has(self.chipsPerHost) && self.chipsPerHost == 8))",
        check=multislice_ok,
    ),
)
