"""RLJobs for the admission-equals-Kubernetes suite (``test_admission_renders.py``): one edit, on the valid
base, of a field the operator copies into the ConfigMap, JobSet, Job or pod; the list of values the
admission refuses on purpose although Kubernetes would take them (each with its reason); and a way to
build an RLJob without the model's checks, to render what the admission refused. Pure: no cluster.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from typing import Any, get_args

from hypothesis import strategies as st
from pydantic import BaseModel

from rljob.api import quantity
from rljob.api.kubetypes import ANNOTATION_KEY, GO_SPACES, MAX_PREFIX
from rljob.api.spec import RLJob
from tests.api.manifests import WORKLOAD, manifest, merge

# --- building an RLJob without the model's checks ------------------------------------------------------


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (``X | None``, ``list[X]``, ``Annotated[...]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _unchecked(cls: type[BaseModel], data: dict[str, Any]) -> BaseModel:
    fields: dict[str, Any] = {}
    for name, value in data.items():
        info = cls.model_fields.get(name)
        model = _model_in(info.annotation) if info is not None else None
        if model is not None and isinstance(value, dict):
            value = _unchecked(model, value)
        elif model is not None and isinstance(value, list):
            value = [_unchecked(model, v) if isinstance(v, dict) else v for v in value]
        fields[name] = value
    return cls.model_construct(**fields)


def unchecked(obj: dict[str, Any]) -> RLJob:
    """``obj`` as an RLJob, every check skipped (defaults still filled), so the renderer copies a refused
    value to where Kubernetes would see it."""
    return _unchecked(RLJob, obj)  # type: ignore[return-value]


def value_at(obj: dict[str, Any], path: str) -> Any:
    """The value at ``spec.volumes[0].emptyDir.sizeLimit``-style ``path``."""
    node: Any = obj
    for name, index in re.findall(r"([^.\[\]]+)(?:\[(\d+)\])?", path):
        node = node[name]
        if index:
            node = node[int(index)]
    return node


# --- where the admission is deliberately stricter than Kubernetes -------------------------------------

_SPACES = re.compile(f"[{GO_SPACES}]")
_QUALIFIED = re.compile(ANNOTATION_KEY)


def _spaces_inside_only(image: str) -> bool:
    return _SPACES.match(image) is None and _SPACES.search(image[-1:]) is None


def _read_otherwise(text: str) -> bool:
    """A size Kubernetes takes but stores as another value (capped, 0 without digits, trimmed)."""
    value = quantity.parse_quantity(re.sub(f"^{_SPACES.pattern}+|{_SPACES.pattern}+$", "", text))
    return value is not None and value >= 0


def _keys_qualified(annotations: dict[str, str]) -> bool:
    return all(_QUALIFIED.fullmatch(k) and len(k.rpartition("/")[0]) <= MAX_PREFIX for k in annotations)


STORAGE_FIELDS = (
    r"spec\.(model\.(checkpointPath|tokenizerPath)|data\.source|(checkpoint|compilationCache)\.directory)"
)

STRICTER: list[tuple[str, str, Callable[[Any], bool]]] = [
    (
        r"spec\.image",
        "whitespace inside an image: Kubernetes checks only its ends, and the kubelet cannot pull it",
        _spaces_inside_only,
    ),
    (
        r"spec\.volumes\[\d+\]\.emptyDir\.sizeLimit",
        "a quantity Kubernetes stores as another value: 2^63-1 for 2^63-1 or more, 0 for one without digits "
        "(Gi), the value without the whitespace around it",
        _read_otherwise,
    ),
    (
        r"spec\.podAnnotations",
        "over 128 KiB of annotations: half of Kubernetes' 256 KiB is left for JobSet, Kueue and GKE",
        _keys_qualified,
    ),
    (
        r"spec\.volumes\[\d+\]\.(secret\.secretName|configMap\.name|persistentVolumeClaim\.claimName)",
        "not a DNS subdomain: no Secret, ConfigMap or claim has that name, so the pod would wait for ever",
        bool,
    ),
    (
        r"spec\.(queueName|priorityClassName|serviceAccountName)",
        "an empty name: Kubernetes reads it as unset (and so does the renderer); leave the field out",
        lambda name: name == "",
    ),
    (
        r"metadata\.name",
        "a name of 41-42 characters: JobSet's pod names would fit 63 with no margin (rules.MAX_NAME_LENGTH)",
        lambda name: len(name) <= 42,
    ),
    (
        STORAGE_FIELDS,
        "a form the trainer does not open: Kubernetes never reads it (it is in the trainer's config file)",
        lambda _: True,
    ),
]
"""(field path pattern, why, which refused values): values the admission refuses and Kubernetes accepts."""


def stricter(path: str, value: Any) -> str | None:
    """Why the admission refuses ``value`` at ``path`` although Kubernetes takes it, or None."""
    for pattern, reason, applies in STRICTER:
        if re.fullmatch(pattern, path) and applies(value):
            return reason
    return None


# --- one-field edits drawn from Kubernetes' alphabets, mostly valid -------------------------------------


def _mostly(valid: st.SearchStrategy[Any], wild: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Three draws in four from ``valid`` (what admission should accept), one from ``wild``."""
    return st.sampled_from([True, True, True, False]).flatmap(lambda ok: valid if ok else wild)


_LABEL = r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?"
_SUBDOMAIN = st.from_regex(rf"{_LABEL}(\.{_LABEL}){{0,2}}", fullmatch=True)
_NAMEISH = st.text(string.ascii_letters + string.digits + "-._/ é", min_size=0, max_size=70)
_SPACE_CHARS = st.sampled_from(list(" \t\n\u00a0\u2028\u3000"))
_IMAGE = st.from_regex(
    r"[a-z0-9]{1,10}(\.[a-z]{2,4})?/[a-z0-9_.-]{1,20}(:[A-Za-z0-9_.-]{1,10})?", fullmatch=True
)
_KEY = st.from_regex(
    rf"({_LABEL}(\.[a-z]{{2,4}})?/)?[A-Za-z0-9]([A-Za-z0-9_.-]{{0,20}}[A-Za-z0-9])?", fullmatch=True
)
_QUANTITY = st.from_regex(r"[0-9]{1,6}(\.[0-9]{1,3})?(Ki|Mi|Gi|Ti|Ei|k|M|G|T|E|m|e[0-9]|)", fullmatch=True)
_URI = st.sampled_from(
    ["gs://my-bucket/a", "/ckpt/a", "relative/dir", "gs://b0b/x y", "s3://b/k", "gs://", "https://h/p"]
)


def _spaced(image: str, space: str, where: int) -> str:
    return (space + image, image + space, image[:1] + space + image[1:])[where]


_EDITS: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], dict[str, Any]]]] = {
    "spec.image": (
        _mostly(_IMAGE, st.builds(_spaced, _IMAGE, _SPACE_CHARS, st.integers(0, 2))),
        lambda v: {"image": v},
    ),
    "spec.queueName": (_mostly(_SUBDOMAIN, _NAMEISH), lambda v: {"queueName": v}),
    "spec.priorityClassName": (_mostly(_SUBDOMAIN, _NAMEISH), lambda v: {"priorityClassName": v}),
    "spec.serviceAccountName": (_mostly(_SUBDOMAIN, _NAMEISH), lambda v: {"serviceAccountName": v}),
    "spec.podAnnotations": (
        st.dictionaries(_mostly(_KEY, _NAMEISH), st.text(max_size=20), max_size=4),
        lambda v: {"podAnnotations": v},
    ),
    "spec.volumes[0].name": (
        _mostly(st.from_regex(_LABEL, fullmatch=True), _NAMEISH),
        lambda v: {"volumes": [{"name": v, "emptyDir": {}}]},
    ),
    "spec.volumes[0].emptyDir.sizeLimit": (
        _mostly(_QUANTITY, st.text("0123456789.+-eEinumkKMGTP ", max_size=12)),
        lambda v: {"volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": v}}]},
    ),
    "spec.volumes[0].secret.secretName": (
        _mostly(_SUBDOMAIN, _NAMEISH),
        lambda v: {"volumes": [{"name": "s", "secret": {"secretName": v}}]},
    ),
    "spec.env[0].valueFrom.secretKeyRef.key": (
        _mostly(
            st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,20}", fullmatch=True), st.text("._-a ", max_size=4)
        ),
        lambda v: {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": v}}}]},
    ),
    "spec.checkpoint.directory": (_URI, lambda v: {"checkpoint": {"directory": v}}),
    "spec.data.source": (_URI, lambda v: merge(WORKLOAD, {"data": {"source": v}})),
}


@st.composite
def one_field_edits(draw: st.DrawFn) -> tuple[str, Any, dict[str, Any]]:
    """(field path, value, RLJob): the valid base with one field copied into the JobSet or pod set."""
    path = draw(st.sampled_from(sorted(_EDITS)))
    values, patch = _EDITS[path]
    value = draw(values)
    return path, value, manifest(patch(value))
