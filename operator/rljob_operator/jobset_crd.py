"""Does the installed JobSet know every field and value the operator writes? Checked once at startup.

Why: the apiserver prunes fields its CRD schema does not know, silently (JobSet's own clients do not ask
for strict validation). On a JobSet older than v0.10.0, ``onJobFailureMessagePatterns`` would vanish from
the disruption rule, which would then match every ``PodFailurePolicy`` failure, including exit 2 (bad
config): a bad config would restart forever instead of failing. So the operator compares what it renders
with the CRD's schema and refuses to start, naming the missing field and the minimum JobSet version. The
JobSets themselves are created with ``fieldValidation=Strict`` (``kube.py``), so a field the schema lost
later is an error, not a silent prune.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from rljob.api import parse_rljob
from rljob_operator import names
from rljob_operator.render import render_jobset

MIN_JOBSET_VERSION = "v0.10.0"
"""First JobSet release with ``failurePolicy.rules[].onJobFailureMessagePatterns`` (docs/install.md)."""
CRD_NAME = f"{names.JOBSET_PLURAL}.{names.JOBSET_GROUP}"
log = logging.getLogger(__name__)

_SAMPLE = {  # one RLJob that uses every JobSet-level feature the renderer has (multislice, queue, ...)
    "apiVersion": "rljob.dev/v1alpha1",
    "kind": "RLJob",
    "metadata": {"name": "probe", "namespace": "default"},
    "spec": {
        "image": "probe",
        "tpu": {"accelerator": "tpu-v6e-slice", "topology": "4x4", "slices": 2},
        "queueName": "probe",
    },
}


def _paths(obj: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key path of a rendered JobSet spec, lists as ``[]``; the Job template is Kubernetes' own
    batch/v1 schema, not JobSet's, so the walk stops there."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            path = (*prefix, key)
            yield path
            if path[-2:] != ("[]", "template"):
                yield from _paths(value, path)
    elif isinstance(obj, list):
        for item in obj:
            yield from _paths(item, (*prefix, "[]"))


def _schema_at(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for key in path:
        if node is None:
            return None
        node = node.get("items") if key == "[]" else (node.get("properties") or {}).get(key)
    return node


def missing(crd: dict[str, Any], jobset: dict[str, Any] | None = None) -> list[str]:
    """Fields (``spec.failurePolicy.rules[].onJobFailureMessagePatterns``) and enum values the rendered
    JobSet uses but the CRD's served v1alpha2 schema lacks."""
    jobset = jobset if jobset is not None else render_jobset(parse_rljob(_SAMPLE))
    version = next((v for v in crd["spec"]["versions"] if v["name"] == names.JOBSET_VERSION), None)
    if version is None or not version.get("served"):
        return [f"version {names.JOBSET_VERSION}"]
    root = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    problems: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for path in _paths(jobset["spec"]):
        if path in seen:
            continue
        seen.add(path)
        node = _schema_at(root, path)
        if node is None:
            problems.append("spec." + ".".join(path).replace(".[]", "[]"))
    for rule in jobset["spec"].get("failurePolicy", {}).get("rules", []):
        enum = (_schema_at(root, ("failurePolicy", "rules", "[]", "action")) or {}).get("enum")
        if enum is not None and rule["action"] not in enum:
            problems.append(f"spec.failurePolicy.rules[].action value {rule['action']}")
    return problems


def jobset_problem(api_client: client.ApiClient | None = None, crd_name: str = CRD_NAME) -> str | None:
    """None when the installed JobSet CRD has everything; else a message for the operator to exit with."""
    api = client.ApiextensionsV1Api(api_client)
    try:
        crd = api.read_custom_resource_definition(crd_name)
    except ApiException as exc:
        if exc.status == 404:
            return (
                f"JobSet is not installed (no CRD {crd_name}); install JobSet {MIN_JOBSET_VERSION} or newer"
            )
        if exc.status == 403:  # the chart's role may read it; a hand-made role may not: say so, go on
            log.warning(
                "cannot read CRD %s (403): JobSet %s or newer is assumed", crd_name, MIN_JOBSET_VERSION
            )
            return None
        raise
    gaps = missing(api.api_client.sanitize_for_serialization(crd))
    if not gaps:
        return None
    return (
        f"the installed JobSet CRD ({crd_name}) lacks {', '.join(gaps)}, which the operator writes: JobSet "
        f"{MIN_JOBSET_VERSION} or newer is required (an older apiserver schema drops the field silently, "
        "and a bad config would then restart forever); see docs/install.md"
    )
