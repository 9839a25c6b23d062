"""The YAML the operator writes is read back as written: the trainer reads ``rljob.yaml`` with the manifest
reader (kubectl's rules), and ``kubectl apply`` reads what ``rljob render`` prints by the same rules.

Strings such as ``y``, ``1e-5`` or ``08`` are valid RLJob values (an env value, an annotation); written
bare they came back as a boolean or a number, and the trainer refused the RLJob the apiserver accepted.
"""

from __future__ import annotations

import io
import re

import pytest
from rljob_operator.render import dump_yaml, render_objects

from rljob.api import load_manifests
from rljob.api.kubetypes import ANNOTATION_KEY
from rljob.api.kubeyaml import read_documents
from tests.api.test_kubeyaml_dump import TRICKY
from tests.operator.builders import make_rljob

STRINGS = [s for s in TRICKY if s]  # an annotation value may be empty too, but an env name may not


@pytest.fixture(scope="module")
def job():
    builder = make_rljob("y").set("spec.env", [{"name": f"V{i}", "value": s} for i, s in enumerate(STRINGS)])
    for i, s in enumerate(STRINGS):  # as key (where it is a qualified name, as a key must be) and value
        builder.pod_annotation(s if re.fullmatch(ANNOTATION_KEY, s) else f"k{i}", s)
    return builder.obj()


def test_the_trainer_reads_its_config_map_back_as_the_operator_validated_it(job) -> None:
    text = render_objects(job)[0]["data"]["rljob.yaml"]
    (found,) = load_manifests(["-"], stdin=io.BytesIO(text.encode()))  # what the trainer's --config does
    assert found.error is None, found.error
    assert found.job is not None and found.job.spec == job.spec


def test_rendered_objects_read_back_as_kubectl_reads_them(job) -> None:
    objects = render_objects(job)
    docs = read_documents(dump_yaml(objects))
    assert [d.errors for d in docs] == [[], []]
    assert [d.value for d in docs] == objects
