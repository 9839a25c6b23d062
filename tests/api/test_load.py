"""The manifest reader: YAML by kubectl's rules, duplicate keys refused, files/folders/stdin, multi-document
files and ``kind: List``, every document checked and every error named with its document and field."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from rljob.api import RLJobError, load_manifests, load_rljob, load_rljobs
from rljob.api.kubeyaml import read_documents, resolve_plain
from tests.api.manifests import manifest

GOOD = yaml.safe_dump(manifest())

# plain scalar -> the JSON value kubectl (sigs.k8s.io/yaml, go-yaml v2 rules) gives it
SPELLINGS = [
    ("1e-6", 1e-6),
    ("4e-2", 0.04),
    ("1e30", 1e30),
    ("1E3", 1000.0),
    ("+1.5", 1.5),
    (".5", 0.5),
    ("1.", 1.0),
    ("3", 3),
    ("-3", -3),
    ("+3", 3),
    ("0x1F", 31),
    ("0o17", 15),
    ("017", 15),  # a leading 0 is octal in go-yaml v2
    ("08", 8.0),  # not octal, not an int: a float
    ("0b101", 5),
    ("1_000", 1000),
    ("99999999999999999999", 1e20),  # above 64 bits: go-yaml reads a float
    ("1e400", "1e400"),  # overflows a float: stays a string
    ("true", True),
    ("True", True),
    ("TRUE", True),
    ("yes", True),
    ("on", True),
    ("y", True),
    ("no", False),
    ("off", False),
    ("N", False),
    ("tRue", "tRue"),
    ("null", None),
    ("~", None),
    ("", None),
    ("NULL", None),
    ("2001-12-14", "2001-12-14"),  # timestamps stay strings
    ("abc", "abc"),
    ("-", "-"),
]


@pytest.mark.parametrize(("text", "value"), SPELLINGS, ids=[repr(t) for t, _ in SPELLINGS])
def test_plain_scalars_read_as_kubectl_reads_them(text: str, value: object) -> None:
    got = resolve_plain(text)
    assert got == value and type(got) is type(value)


def test_quoted_and_tagged_scalars() -> None:
    [doc] = read_documents("a: '1e-6'\nb: \"yes\"\nc: !!str 5\nd: !!float 5\ne: !!int '7'\n")
    assert doc.errors == []
    assert doc.value == {"a": "1e-6", "b": "yes", "c": "5", "d": 5.0, "e": 7}


def test_learning_rate_in_exponent_form_is_a_number(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(GOOD + "  grpo:\n    learningRate: 1e-6\n    beta: 4e-2\n")
    job = load_rljob(path)
    assert job.spec.grpo.learningRate == 1e-6 and job.spec.grpo.beta == 0.04


def test_duplicate_keys_are_refused_with_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(GOOD + "  image: other:2\n")
    first = GOOD.splitlines().index("  image: ghcr.io/example/rljob-trainer:0.1.0") + 1
    with pytest.raises(RLJobError) as info:
        load_rljob(path)
    last = len(GOOD.splitlines()) + 1
    assert info.value.errors == [f'line {last}: key "image" already set in this mapping at line {first}']
    assert "is not valid YAML" in str(info.value)


def test_infinity_and_cycles_and_bad_tags_are_errors_not_crashes() -> None:
    [doc] = read_documents("a: .inf\nb: &r [1, *r]\nc: !!int abc\n")
    assert [e.split(":")[0] for e in doc.errors] == ["line 1", "line 2", "line 3"]


def test_merge_keys_and_anchors() -> None:
    [doc] = read_documents("base: &b {a: 1, b: 2}\nuse:\n  <<: *b\n  b: 3\n")
    assert doc.value["use"] == {"a": 1, "b": 3}


def test_keys_become_json_strings_as_in_kubectl() -> None:
    """sigs.k8s.io/yaml writes non-string keys as strings; `y` is a boolean key there, so "true"."""
    [doc] = read_documents("y: 1\n2: b\nno: c\n")
    assert doc.value == {"true": 1, "2": "b", "false": "c"}


def test_every_document_is_checked_and_named(tmp_path: Path) -> None:
    bad = yaml.safe_dump(manifest({"grpo": {"beta": "x"}}, name="bad"))
    path = tmp_path / "many.yaml"
    path.write_text(f"{GOOD}---\n{bad}---\n# empty\n---\n{GOOD}")
    found = load_manifests([path])
    assert [f.where for f in found] == [f"{path} (document {n})" for n in (1, 2, 4)]
    assert [f.error is None for f in found] == [True, False, True]
    assert "spec.grpo.beta" in str(found[1].error) and f"{path} (document 2) is invalid" in str(
        found[1].error
    )


def test_a_syntax_error_keeps_the_documents_before_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(f"{GOOD}---\nspec: [unclosed\n")
    found = load_manifests([path])
    assert found[0].job is not None
    assert "(document 2) is not valid YAML" in str(found[1].error) and "line " in str(found[1].error)


def test_kind_list_is_flattened(tmp_path: Path) -> None:
    items = [manifest(name="a"), manifest({"grpo": {"batchSize": 0}}, name="b")]
    path = tmp_path / "list.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    found = load_manifests([path])
    assert [f.where for f in found] == [f"{path} (items[0])", f"{path} (items[1])"]
    assert found[0].job.metadata.name == "a"
    assert "spec.grpo.batchSize" in str(found[1].error)


def test_other_kinds_are_named_not_dumped(tmp_path: Path) -> None:
    path = tmp_path / "ns.yaml"
    path.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    with pytest.raises(RLJobError) as info:
        load_rljobs(path)
    assert info.value.errors == [
        "kind: Namespace is not an RLJob (rljob.dev/v1alpha1); this command reads RLJobs"
    ]


def test_folder_and_stdin(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yml").write_text(yaml.safe_dump(manifest(name="second")))
    (tmp_path / "notes.txt").write_text("not a manifest")
    names = [j.metadata.name for j in load_rljobs(tmp_path)]
    assert names == ["grpo-demo", "second"]
    assert load_rljob("-", stdin=io.BytesIO(GOOD.encode())).metadata.name == "grpo-demo"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"kind: \xc3\x28\n", "line 1: not UTF-8 text (byte 0xc3)"),
        (GOOD.encode() + b"\n# caf\xe9\n", f"line {GOOD.count(chr(10)) + 2}: not UTF-8 text (byte 0xe9)"),
        (b"\xff\xfe\x00\xd8", "not UTF-16 text"),
        (b"", "no YAML document found"),
        (b"- a\n- b\n", "<root>: expected a mapping, got list"),
    ],
)
def test_unreadable_inputs_are_errors(tmp_path: Path, data: bytes, expected: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_bytes(data)
    with pytest.raises(RLJobError) as info:
        load_rljob(path)
    assert expected in str(info.value)


def test_utf16_with_bom_is_read(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_bytes(GOOD.encode("utf-16"))
    assert load_rljob(path).metadata.name == "grpo-demo"


def test_missing_file_and_empty_folder(tmp_path: Path) -> None:
    found = load_manifests([tmp_path / "none.yaml", tmp_path])
    assert ["no such file or directory" in str(f.error) or "no .yaml" in str(f.error) for f in found] == [
        True,
        True,
    ]
