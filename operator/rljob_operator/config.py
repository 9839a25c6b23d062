"""The trainer's config: the RLJob itself, in a ConfigMap the operator owns, mounted into every pod.

The trainer reads it with ``rljob.api.load_rljob`` (the same model, the same validation), so the file is
exactly an RLJob manifest: spec with defaults filled in (what runs is what the operator validated, even if
the trainer image carries newer defaults), unset optional fields left out (e.g. ``rollout.vllmBlockSize``
appears only when set), no status and only the identifying metadata (no uid, resourceVersion or kopf
annotations, so the rendering is deterministic).
"""

from __future__ import annotations

from typing import Any

import yaml

from rljob.api import to_manifest
from rljob.api.kubeyaml import Dumper
from rljob.api.spec import RLJob
from rljob_operator import names


def trainer_manifest(job: RLJob) -> dict[str, Any]:
    """The RLJob as the trainer will read it."""
    manifest = to_manifest(job)
    manifest.pop("status", None)
    manifest["metadata"] = {
        k: v for k, v in (("name", job.metadata.name), ("namespace", job.metadata.namespace)) if v is not None
    }
    return manifest


def trainer_config_yaml(job: RLJob) -> str:
    """The ``rljob.yaml`` file, written so that the trainer's reader (kubectl's rules) reads back each
    string as a string."""
    return yaml.dump(trainer_manifest(job), Dumper=Dumper, sort_keys=False, default_flow_style=False)


def config_map(job: RLJob, labels: dict[str, str]) -> dict[str, Any]:
    """The ConfigMap ``<name>-config`` holding ``rljob.yaml``; immutable, as the spec it carries is."""
    metadata: dict[str, Any] = {"name": names.config_map_name(job.metadata.name)}
    if job.metadata.namespace:
        metadata["namespace"] = job.metadata.namespace
    metadata["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "immutable": True,
        "data": {names.CONFIG_KEY: trainer_config_yaml(job)},
    }
