"""What rljob writes as YAML reads back unchanged by kubectl's rules (``kubeyaml.Dumper``).

PyYAML's own dumper quotes only what YAML 1.1 would not read as a string, so a string such as ``y``,
``1e-5`` or ``08`` was written bare, and the trainer (and kubectl) read a boolean or a number.
"""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rljob.api.kubeyaml import Dumper, read_documents
from tests.api.test_load import SPELLINGS

# strings whose plain spelling kubectl reads as something else, and the characters they are made of
TRICKY = [text for text, _ in SPELLINGS] + ["Y", "n", "1e3", "0b1", ".inf", "-.Inf", ".NaN", "0o7", "1_0"]
_strings = st.sampled_from(TRICKY) | st.text(alphabet="0123456789.eE+-_xXoObBnNyY~: #'\"\n", max_size=8)
_scalars = (
    _strings
    | st.booleans()
    | st.none()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
)
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_strings, children, max_size=3),
    max_leaves=12,
)


def read_back(value: object) -> object:
    (doc,) = read_documents(yaml.dump({"v": value}, Dumper=Dumper))
    assert doc.errors == []
    return doc.value["v"]


@settings(max_examples=300, deadline=None)
@given(_values)
def test_written_yaml_reads_back_unchanged(value: object) -> None:
    assert read_back(value) == value


def test_strings_kubectl_would_retype_are_quoted() -> None:
    assert yaml.dump({"a": "y", "b": "1e-5", "c": "08", "d": "abc"}, Dumper=Dumper) == (
        "a: 'y'\nb: '1e-5'\nc: '08'\nd: abc\n"
    )
