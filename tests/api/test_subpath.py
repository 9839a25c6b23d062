"""spec.volumeMounts[].subPath is refused exactly when the apiserver's pod validation would refuse it.

Kubernetes (pkg/apis/core/validation, validateLocalDescendingPath) refuses a subPath that is absolute or
has a ".." element once split on "/"; the RLJob's pattern must agree on every path, or the pod is refused
only when the Job creates it. The cases in cases_pod.py also go to the real apiserver
(tests/e2e/test_reliability_cel.py).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from rljob.api.pod import InVolumePath

_ADAPTER = TypeAdapter(InVolumePath)


def kubernetes_accepts(sub_path: str) -> bool:
    """The apiserver's rule, restated: not absolute, no element equal to ".."."""
    return not sub_path.startswith("/") and ".." not in sub_path.split("/")


def model_accepts(sub_path: str) -> bool:
    try:
        _ADAPTER.validate_python(sub_path)
    except ValidationError:
        return False
    return True


@given(st.text(alphabet="a./", min_size=1, max_size=12))
def test_sub_path_pattern_is_the_apiservers_rule(sub_path: str) -> None:
    assert model_accepts(sub_path) == kubernetes_accepts(sub_path)
