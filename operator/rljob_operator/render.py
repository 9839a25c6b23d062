"""Public entry of the renderer: an RLJob in, the objects the operator creates for it out.

Pure and deterministic (same RLJob, same dicts, byte for byte once dumped): ``rljob render`` prints it as a
dry run users can diff, the golden tests pin it, and the handlers create exactly these objects.
"""

from __future__ import annotations

from typing import Any

import yaml

from rljob.api.kubeyaml import Dumper
from rljob.api.spec import RLJob
from rljob_operator.config import config_map
from rljob_operator.jobset import jobset, owned_labels
from rljob_operator.pod import RenderOptions
from rljob_operator.slices import slice_shape

__all__ = ["RenderOptions", "dump_yaml", "render_config_map", "render_jobset", "render_objects"]


def render_config_map(job: RLJob) -> dict[str, Any]:
    """The trainer-config ConfigMap."""
    return config_map(job, owned_labels(job))


def render_jobset(job: RLJob, options: RenderOptions | None = None) -> dict[str, Any]:
    """The JobSet."""
    return jobset(job, slice_shape(job.spec.tpu), options or RenderOptions())


def render_objects(job: RLJob, options: RenderOptions | None = None) -> list[dict[str, Any]]:
    """ConfigMap then JobSet (creation order: the pods mount the ConfigMap)."""
    return [render_config_map(job), render_jobset(job, options)]


class _Dumper(Dumper):
    """Multi-line strings (the embedded ``rljob.yaml``) as ``|`` blocks, so a diff shows the changed line;
    other strings quoted where kubectl would read them as something else (``kubeyaml.Dumper``)."""

    def represent_str(self, data: str) -> yaml.ScalarNode:
        if "\n" in data:
            return self.represent_scalar("tag:yaml.org,2002:str", data, style="|")
        return super().represent_str(data)


_Dumper.add_representer(str, _Dumper.represent_str)


def dump_yaml(objects: list[dict[str, Any]]) -> str:
    """Objects as a YAML stream in their own key order (what ``rljob render`` prints)."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
