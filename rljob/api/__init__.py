"""The RLJob API: model, rules, loading and CRD generation. Pure Python: no Kubernetes client, no JAX."""

from rljob.api.load import (
    Found,
    RLJobError,
    load_manifests,
    load_rljob,
    load_rljobs,
    parse_rljob,
    to_manifest,
)
from rljob.api.spec import API_VERSION, GROUP, KIND, PLURAL, VERSION, RLJob, RLJobSpec, RLJobStatus

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "Found",
    "RLJob",
    "RLJobError",
    "RLJobSpec",
    "RLJobStatus",
    "load_manifests",
    "load_rljob",
    "load_rljobs",
    "parse_rljob",
    "to_manifest",
]
