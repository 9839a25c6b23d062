"""Types of the RLJob fields that the operator copies into a JobSet, Job or pod, checked as Kubernetes will
check them there (k8s.io/apimachinery/pkg/util/validation, pkg/apis/core/validation), so nothing that
passes admission is refused when the operator creates the JobSet or the Job controller its pods.

Where the model is deliberately stricter than Kubernetes, the type's docstring says why (a value
Kubernetes accepts but that can only fail or be silently changed later); tests/e2e/test_admission_renders.py
holds the same list and shows the real apiserver accepting each such value.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from rljob.api import quantity
from rljob.api.check import Check, cel_string

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_ANY_CASE_SUBDOMAIN = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*"
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
ANNOTATION_KEY = rf"^({_ANY_CASE_SUBDOMAIN}/)?{_NAME_PART}$"
"""An annotation key: ``[prefix/]name``, the prefix a DNS subdomain of at most 253 characters (checked
apart: RE2 cannot count it), the name at most 63 (IsQualifiedName of the key lowercased, as
ValidateAnnotations checks it: an annotation's prefix may have capitals, a label's may not)."""
MAX_PREFIX = 253

ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
"""A DNS subdomain, what Kubernetes requires of a ServiceAccount, PriorityClass, Secret, ConfigMap or
claim name. Stricter than the pod's own check for a Secret, ConfigMap or claim volume (only non-empty):
no such object can have another name, so the pod would wait for it for ever."""
VolumeName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
QueueName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_SUBDOMAIN)]
"""A Kueue LocalQueue name as a label value: a DNS subdomain (Kueue's webhook refuses any other value of
kueue.x-k8s.io/queue-name) of at most 63 characters (a label value's limit)."""

GO_SPACES = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
"""What Go's unicode.IsSpace calls whitespace (strings.TrimSpace, which Kubernetes' image check uses), as
the inside of a regular-expression class."""
_SPACE = f"[{GO_SPACES}]"
_SPACE_RE = re.compile(_SPACE)

Image = Annotated[
    str,
    Field(min_length=1, max_length=512),
    Check(
        message="must not contain whitespace (Kubernetes refuses it around an image, and the kubelet "
        "cannot pull a reference holding it)",
        cel=f"!self.matches({cel_string(_SPACE)})",
        check=lambda s: _SPACE_RE.search(s) is None,
    ),
]
"""A container image. Kubernetes refuses only leading and trailing whitespace; whitespace inside is
refused here too, because no image reference holds it (the kubelet reports InvalidImageName)."""

_ANNOTATION_KEY_RE = re.compile(ANNOTATION_KEY)


def _qualified(key: str) -> bool:
    prefix = key.rpartition("/")[0]  # the pattern allows at most one "/"
    return _ANNOTATION_KEY_RE.fullmatch(key) is not None and len(prefix) <= MAX_PREFIX


MAX_ANNOTATION_BYTES = 128 * 1024
"""podAnnotations' keys and values together, in UTF-8 bytes. Kubernetes allows 256 KiB of annotations per
object; half is left for those the operator, JobSet, Kueue and GKE's webhooks add to the same pods."""


def _annotation_bytes(annotations: dict[str, str]) -> int:
    return sum(len(text.encode("utf-8", "surrogatepass")) for item in annotations.items() for text in item)


Annotations = Annotated[
    dict[str, Annotated[str, Field(max_length=4096)]],
    Field(max_length=64),
    Check(
        message="keys must be qualified names ([prefix/]name: the prefix a DNS subdomain of at most 253 "
        "characters, the name at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
        "letter or digit)",
        cel=f"self.all(k, k.matches({cel_string(ANNOTATION_KEY)}) && "
        f"(!k.contains('/') || size(k.split('/')[0]) <= {MAX_PREFIX}))",
        check=lambda d: all(_qualified(k) for k in d),
    ),
    Check(
        message=f"keys and values together must stay within {MAX_ANNOTATION_BYTES} bytes (Kubernetes "
        "allows 256 KiB of annotations per pod; the rest is for JobSet's, Kueue's and GKE's)",
        cel=f"self.map(k, size(bytes(k)) + size(bytes(self[k]))).sum() <= {MAX_ANNOTATION_BYTES}",
        check=lambda d: _annotation_bytes(d) <= MAX_ANNOTATION_BYTES,
    ),
]
"""Pod annotations, checked as Kubernetes checks a pod template's."""

QUANTITY_PATTERN = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
"""The pattern controller-gen writes for every resource.Quantity of a CRD (the JobSet's included, though
JobSet's webhook re-encodes the quantity before the schema sees it): it refuses the strings ParseQuantity
reads as 0 although they hold no digit (``Gi``, ``.``, ``+``) and whitespace around a quantity (which
Kubernetes' JSON decoding trims)."""
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)

Size = Annotated[
    str,
    Field(max_length=32),
    Check(
        message="must be a Kubernetes quantity (e.g. 100Gi, 500M, 10k, 1e9; the suffixes are k M G T P E "
        "and Ki Mi Gi Ti Pi Ei), not negative and below 2^63-1 (Kubernetes would store a larger value "
        "as 2^63-1)",
        cel=f"self.matches({cel_string(QUANTITY_PATTERN)}) && isQuantity(self) && "
        "!quantity(self).isLessThan(quantity('0')) && "
        "quantity(self).isLessThan(quantity('9223372036854775807'))",
        check=lambda s: _QUANTITY_RE.fullmatch(s) is not None and quantity.is_size(s),
    ),
]
"""A size in bytes, as the apiserver takes it (ParseQuantity: ``10k`` and ``500m`` yes, ``10K`` no; not
negative for a pod). Stricter only where Kubernetes would silently store another value than the one
written: 2^63-1 for a larger one, 0 for one without digits, the value without the whitespace around it
(QUANTITY_PATTERN)."""
