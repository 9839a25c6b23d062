"""RLJob test cases of the fields the operator copies into the JobSet, Job or pod (issue 43): each value is
refused as Kubernetes would refuse it there, or accepted because Kubernetes accepts it (``rljob/api/
kubetypes.py``); and the storage URL fields, which take what the trainer opens. ``cases.py`` gathers them;
tests/e2e/test_admission_renders.py renders each and asks the real apiserver."""

from __future__ import annotations

from typing import Any

from tests.api.manifests import manifest


def size_limit(value: str) -> dict[str, Any]:
    """The base manifest with one emptyDir of ``sizeLimit: value``."""
    return manifest({"volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": value}}]})


_SIZES = "spec.volumes[0].emptyDir.sizeLimit"
_NOTES = "spec.podAnnotations"

KUBE_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    # labels: spec.queueName is the value of the JobSet's kueue.x-k8s.io/queue-name label
    ("queue name", manifest({"queueName": "team-a.gpu"}), None),
    ("queue name with a space", manifest({"queueName": "team a"}), "spec.queueName"),
    ("queue name with a slash", manifest({"queueName": "team/a"}), "spec.queueName"),
    ("queue name upper case", manifest({"queueName": "Team-A"}), "spec.queueName"),
    ("queue name ends with -", manifest({"queueName": "team-"}), "spec.queueName"),
    ("queue name at 63", manifest({"queueName": "q" * 63}), None),
    ("queue name over 63", manifest({"queueName": "q" * 64}), "spec.queueName"),
    # annotation keys: qualified names, [prefix/]name
    ("annotation keys", manifest({"podAnnotations": {"example.com/a_b.c": "x", "A-1": ""}}), None),
    ("annotation key with a space", manifest({"podAnnotations": {"my key": "x"}}), _NOTES),
    ("annotation key with two slashes", manifest({"podAnnotations": {"a/b/c": "x"}}), _NOTES),
    ("annotation key empty prefix", manifest({"podAnnotations": {"/a": "x"}}), _NOTES),
    ("annotation key upper-case prefix", manifest({"podAnnotations": {"Example.com/a": "x"}}), None),
    ("annotation key prefix ends with -", manifest({"podAnnotations": {"example-/a": "x"}}), _NOTES),
    ("annotation key name 63", manifest({"podAnnotations": {"a" * 63: "x"}}), None),
    ("annotation key name 64", manifest({"podAnnotations": {"a" * 64: "x"}}), _NOTES),
    (
        "annotation key prefix 253",
        manifest({"podAnnotations": {("a" * 63 + ".") * 3 + "a" * 61 + "/n": ""}}),
        None,
    ),
    (
        "annotation key prefix 254",
        manifest({"podAnnotations": {("a" * 63 + ".") * 3 + "a" * 62 + "/n": ""}}),
        _NOTES,
    ),
    ("annotation key ends with .", manifest({"podAnnotations": {"a.": "x"}}), _NOTES),
    (
        "annotations over the byte budget",
        manifest({"podAnnotations": {f"k{i}": "é" * 4096 for i in range(17)}}),
        _NOTES,
    ),
    (
        "annotations within the byte budget",
        manifest({"podAnnotations": {f"k{i}": "é" * 4000 for i in range(16)}}),
        None,
    ),
    # images: no whitespace
    ("image with spaces around", manifest({"image": " ghcr.io/example/rljob-trainer:0.1.0 "}), "spec.image"),
    ("image with a trailing newline", manifest({"image": "ghcr.io/example/t:1\n"}), "spec.image"),
    ("image with a no-break space", manifest({"image": "ghcr.io/example/t:1\u00a0"}), "spec.image"),
    ("image with a space inside", manifest({"image": "ghcr.io/example/t 1"}), "spec.image"),
    ("image by digest", manifest({"image": "ghcr.io/e/t@sha256:" + "a" * 64}), None),
    # names: DNS subdomains and labels
    ("priority class", manifest({"priorityClassName": "high-priority.tpu"}), None),
    (
        "priority class with a space",
        manifest({"priorityClassName": "high priority"}),
        "spec.priorityClassName",
    ),
    ("priority class upper case", manifest({"priorityClassName": "High"}), "spec.priorityClassName"),
    ("service account with _", manifest({"serviceAccountName": "a_b"}), "spec.serviceAccountName"),
    (
        "volume name with a dot",
        manifest({"volumes": [{"name": "a.b", "emptyDir": {}}]}),
        "spec.volumes[0].name",
    ),
    (
        "secret volume name upper case",
        manifest({"volumes": [{"name": "s", "secret": {"secretName": "Hf"}}]}),
        "spec.volumes[0].secret.secretName",
    ),
    (
        "env secret key '..'",
        manifest({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": ".."}}}]}),
        "spec.env[0].valueFrom.secretKeyRef.key",
    ),
    (
        "env secret key '..x'",
        manifest({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "..x"}}}]}),
        "spec.env[0].valueFrom.secretKeyRef.key",
    ),
    (
        "env secret key '.x'",
        manifest({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": ".x"}}}]}),
        None,
    ),
    # quantities: Kubernetes' grammar (k is kilo, K is nothing) and range
    *(
        (f"sizeLimit {value!r}", size_limit(value), None if ok else _SIZES)
        for value, ok in (
            ("100Gi", True),
            ("10k", True),
            ("500m", True),
            ("1e3", True),
            ("1E", True),  # exa (10^18): a valid quantity
            ("1Ei", True),  # exbi (2^60)
            ("7Ei", True),
            ("0", True),
            ("10K", False),
            ("1KI", False),
            ("1 Gi", False),
            ("-1Gi", False),
            ("8Ei", False),  # 2^63: Kubernetes would store 2^63-1
            ("99999999999999999999Ei", False),
            ("1e19", False),
            ("Gi", False),  # Kubernetes reads 0
            (" 1Gi", False),  # Kubernetes trims it
            (".5", True),
            ("1.", True),
            ("+1", True),
            (".", False),
            ("1e3.5", False),
            ("", False),
        )
    ),
    # storage URLs: the forms the trainer opens, one rule for every such field
    ("checkpoint model s3", manifest({"model": {"checkpointPath": "s3://b/k"}}), "spec.model.checkpointPath"),
    ("tokenizer s3", manifest({"model": {"tokenizerPath": "s3://b/t"}}), "spec.model.tokenizerPath"),
    (
        "checkpoints to https",
        manifest({"checkpoint": {"directory": "https://x/ckpt"}}),
        "spec.checkpoint.directory",
    ),
    (
        "checkpoints to hf",
        manifest({"checkpoint": {"directory": "hf://org/repo"}}),
        "spec.checkpoint.directory",
    ),
    (
        "checkpoints gs with a space",
        manifest({"checkpoint": {"directory": "gs://bucket/a b"}}),
        "spec.checkpoint.directory",
    ),
    (
        "checkpoints gs with a no-break space",
        manifest({"checkpoint": {"directory": "gs://bucket/a\u00a0b"}}),
        "spec.checkpoint.directory",
    ),
    (
        "compilation cache gs no bucket",
        manifest({"compilationCache": {"directory": "gs://"}}),
        "spec.compilationCache.directory",
    ),
]
