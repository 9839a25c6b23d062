"""The slice shape of an RLJob: what one slice's Job and each of its pods must ask for.

Only a view over ``rljob.api.tpu`` (the one TPU table); nothing here re-derives chip counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from rljob.api import tpu
from rljob.api.pod import CapacitySpec
from rljob.api.spec import TPUSpec
from rljob_operator import names
from rljob_operator.capacity import capacity_selector


@dataclass(frozen=True)
class SliceShape:
    """One TPU slice: ``hosts`` pods, each on its own node with ``chips_per_host`` chips."""

    accelerator: str
    topology: str
    chips_per_host: int
    hosts: int
    slices: int
    machine_type: str
    ambiguous: bool
    """The accelerator and topology labels match more than one machine type (v5e/v6e 2x4: one 8-chip
    host or two 4-chip hosts), so the node selector must also name the machine type."""
    capacity: CapacitySpec
    """On-demand, Spot, a reservation or flex-start: adds GKE's labels for it to the node selector."""

    def node_selector(self) -> dict[str, str]:
        """Labels GKE puts on the slice's nodes; the machine type only where the TPU labels are ambiguous,
        so that a plain selector keeps working on node pools whose instance-type label differs; then the
        capacity type's labels (rljob_operator/capacity.py)."""
        selector = {names.ACCELERATOR_LABEL: self.accelerator, names.TOPOLOGY_LABEL: self.topology}
        if self.ambiguous:
            selector[names.INSTANCE_TYPE_LABEL] = self.machine_type
        return selector | capacity_selector(self.capacity)


def slice_shape(spec: TPUSpec) -> SliceShape:
    """The shape of the RLJob's slices, from the TPU table."""
    acc, topo, override = spec.accelerator, spec.topology, spec.chipsPerHost
    return SliceShape(
        accelerator=acc,
        topology=topo,
        chips_per_host=tpu.chips_per_host(acc, topo, override),
        hosts=tpu.hosts_per_slice(acc, topo, override),
        slices=spec.slices,
        machine_type=tpu.machine_type(acc, topo, override),
        ambiguous=len(tpu.allowed_chips_per_host(acc, topo)) > 1,
        capacity=spec.capacity,
    )
