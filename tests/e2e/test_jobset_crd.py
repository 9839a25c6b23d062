"""The operator's JobSet check against the real apiserver: the installed JobSet v0.12 CRD passes, and a
copy of it without ``onJobFailureMessagePatterns`` (JobSet before v0.10) under a throwaway group fails
with the field and the minimum version named. The copy lives under its own group, so the shared cluster's
real JobSet CRD is never touched. And the operator's creates ask for strict field validation: a field
the server's schema does not know is refused, not silently dropped."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import config
from kubernetes.client.exceptions import ApiException
from rljob_operator import jobset_crd
from rljob_operator.kube import Kube
from rljob_operator.render import render_objects

from rljob.api import parse_rljob
from tests.e2e.kube import apply_yaml, kubectl, kubectl_json, wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def api_client(cluster: Any) -> Iterator[Any]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def old_jobset_crd(cluster: Any) -> Iterator[str]:
    """JobSet's CRD as the apiserver serves it, renamed to a throwaway group, minus the v0.10 field."""
    real = kubectl_json("get", "crd", jobset_crd.CRD_NAME)
    group = f"old-{uuid.uuid4().hex[:6]}.jobset.rljob.dev"
    spec = real["spec"]
    spec["group"] = group
    spec.pop("conversion", None)
    for version in spec["versions"]:
        rules = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["failurePolicy"]
        del rules["properties"]["rules"]["items"]["properties"]["onJobFailureMessagePatterns"]
    name = f"{spec['names']['plural']}.{group}"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": spec,
    }
    apply_yaml(crd, server_side=True)
    try:
        wait_for(
            lambda: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in kubectl_json("get", "crd", name).get("status", {}).get("conditions", [])
            ),
            timeout=60,
            message=f"CRD {name} established",
        )
        yield name
    finally:
        kubectl("delete", "crd", name, "--wait=false", "--ignore-not-found", check=False)


def test_installed_jobset_crd_has_every_field_the_operator_writes(api_client: Any) -> None:
    assert jobset_crd.jobset_problem(api_client) is None


def test_jobset_crd_without_message_patterns_is_refused_with_the_field_named(
    api_client: Any, old_jobset_crd: str
) -> None:
    problem = jobset_crd.jobset_problem(api_client, crd_name=old_jobset_crd)
    assert problem is not None
    assert "lacks spec.failurePolicy.rules[].onJobFailureMessagePatterns" in problem
    assert "JobSet v0.10.0 or newer is required" in problem


def test_missing_jobset_crd_is_named(api_client: Any) -> None:
    problem = jobset_crd.jobset_problem(api_client, crd_name="jobsets.nowhere.rljob.dev")
    assert (
        problem
        == "JobSet is not installed (no CRD jobsets.nowhere.rljob.dev); install JobSet v0.10.0 or newer"
    )


def test_operator_creates_jobsets_with_strict_field_validation(api_client: Any, namespace: str) -> None:
    """Without ``fieldValidation=Strict`` the apiserver would store the JobSet minus the field its schema
    lacks (the silent drop that turns exit 2 into endless restarts on a JobSet older than v0.10). The
    ConfigMap is a typed object: the client library itself refuses unknown fields there."""
    job = parse_rljob(
        {
            "apiVersion": "rljob.dev/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": "strict", "namespace": namespace},
            "spec": {
                "image": "rljob-trainer:test",
                "tpu": {"accelerator": "tpu-v6e-slice", "topology": "1x1"},
            },
        }
    )
    _, jobset = render_objects(job)
    jobset["spec"]["failurePolicy"]["rules"][0]["notAJobSetField"] = "dropped silently without Strict"
    with pytest.raises(ApiException) as refused:
        Kube(api_client).create_owned(jobset, owner_uid="no-owner")
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status in (400, 422), message
    assert 'unknown field "spec.failurePolicy.rules[0].notAJobSetField"' in message, message
