"""YAML read the way ``kubectl`` reads it, with duplicate keys refused.

Why not plain ``yaml.safe_load``: kubectl turns YAML into JSON with sigs.k8s.io/yaml, whose scalar rules
are go-yaml v2's, not PyYAML's. PyYAML reads ``1e-6`` as a string and ``learningRate: 1e-6`` was refused
while ``kubectl apply`` accepted it. ruamel.yaml (a maintained YAML parser) builds the node tree, with
line numbers, anchors, aliases and tags; this module only turns that tree into JSON-like values by
kubectl's rules:

* plain scalars: ``true``/``yes``/``on``/``y`` (and ``false``/``no``/``off``/``n``, in the three
  capitalisations) are booleans; ``null``, ``~`` and empty are null; ``1e-6``, ``4e-2``, ``1e30``, ``.5``
  are floats; ``0x1f``, ``0o17``, ``017`` (octal), ``0b101`` and ``1_000`` are integers; everything else
  (dates too) is a string. Quoted scalars are always strings.
* ``.inf`` and ``.nan`` are refused: JSON cannot carry them (kubectl fails on them too).
* merge keys (``<<: *base``) merge; explicit keys win.
* stricter than kubectl, on purpose: a key given twice in one mapping is an error naming both lines
  (kubectl keeps the last one silently). tests/e2e/test_yaml_differential.py compares verdicts with
  ``kubectl apply --dry-run=server`` on a generated corpus.

What rljob writes as YAML (the trainer's ``rljob.yaml``, ``rljob render``, the CRD) goes through
``Dumper``: PyYAML's emitter, with every string quoted that these rules would not read back as the same
string (PyYAML writes ``y``, ``1e-5`` or ``08`` unquoted, and kubectl and the trainer read a boolean or a
number).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from typing import Any

import yaml as pyyaml
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.tag import Tag

_TAG = "tag:yaml.org,2002:"
_PLAIN = "!rljob-plain"  # our marker for an untagged plain scalar (resolved below, not by ruamel)
MAX_NODES = 100_000
"""Values built per document, aliases expanded: bounds "billion laughs" documents (a real RLJob has ~50)."""

_BOOLS = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_SPECIAL_FLOATS = frozenset(
    f"{sign}.{word}" for sign in ("", "+", "-") for word in ("inf", "Inf", "INF")
) | frozenset((".nan", ".NaN", ".NAN"))
_INT = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_DOT_FLOAT = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")
_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1


class _NotJSON(ValueError):
    """A scalar that has no JSON value (``.inf``, ``.nan``)."""


def _go_int(text: str) -> int:
    """Go's strconv.ParseInt(text, 0, 64) value (base from the prefix; a leading 0 means octal)."""
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    if len(digits) > 1 and digits[0] == "0" and digits[1] in "xXoObB":
        return sign * int(digits, 0)
    return sign * int(digits, 8 if len(digits) > 1 and digits[0] == "0" else 10)


def resolve_plain(text: str) -> Any:
    """The JSON value of an untagged plain scalar, as go-yaml v2 (and so kubectl) resolves it."""
    if text in _BOOLS:
        return _BOOLS[text]
    if text in _NULLS:
        return None
    if text in _SPECIAL_FLOATS:
        raise _NotJSON(f"{text!r} (infinity or NaN) cannot be represented in JSON; quote it for a string")
    first = text[0]
    if first == "." and _DOT_FLOAT.fullmatch(text):
        return float(text)
    if not (first.isdigit() and first.isascii()) and first not in "+-":
        return text
    plain = text.replace("_", "")
    as_int = _go_int(plain) if _INT.fullmatch(plain) else None
    if as_int is not None and (
        _INT64[0] <= as_int <= _INT64[1] or (plain[0] not in "+-" and as_int <= _UINT64_MAX)
    ):
        return as_int
    if _FLOAT.fullmatch(plain) and abs(float(plain)) != float("inf"):
        return float(plain)
    return as_int if as_int is not None else text  # out of 64 bits: Go keeps it as a big integer


def _key_string(key: Any) -> str | None:
    """A mapping key as sigs.k8s.io/yaml writes it into JSON (None when it has no JSON form)."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, str):
        return key
    if isinstance(key, int) and _INT64[0] <= key <= _INT64[1]:
        return str(key)
    if isinstance(key, float):
        return repr(key)
    return None


class _PlainResolver(VersionedResolver):
    """Leaves untagged plain scalars to ``resolve_plain``: ruamel's own resolvers are YAML 1.1 or 1.2,
    and kubectl's rules are neither exactly."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode and implicit[0]:
            return Tag(suffix=_PLAIN)
        return super().resolve(kind, value, implicit)


@dataclass
class Document:
    """One YAML document: its 1-based number, first line, JSON-like value and problems."""

    number: int
    line: int
    value: Any = None
    errors: list[str] = field(default_factory=list)


class _Builder:
    """Turns one document's node tree into JSON-like values, collecting every problem."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.count = 0
        self.active: set[int] = set()

    def error(self, node: Node, message: str) -> None:
        self.errors.append(f"line {node.start_mark.line + 1}: {message}")

    def build(self, node: Node) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _NotJSON(f"more than {MAX_NODES} values after expanding aliases")
        if id(node) in self.active:
            self.error(node, "an alias refers to a node that contains it (a cycle)")
            return None
        self.active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self.mapping(node)
            if isinstance(node, SequenceNode):
                return [self.build(child) for child in node.value]
            return self.scalar(node)
        finally:
            self.active.discard(id(node))

    def scalar(self, node: Node) -> Any:
        tag, text = node.tag, node.value
        try:
            if tag == _PLAIN:
                return resolve_plain(text)
            if tag == _TAG + "str" or not tag.startswith(_TAG):
                return text  # quoted, !!str, or an application tag (kubectl keeps the text too)
            if tag == _TAG + "binary":
                return base64.b64decode(text, validate=False).decode("utf-8", "replace")
            value = resolve_plain(text) if text else None
        except _NotJSON as exc:
            self.error(node, str(exc))
            return None
        except (binascii.Error, ValueError):
            self.error(node, f"{text!r} is not valid base64 for !!binary")
            return None
        kinds = {"int": int, "float": (int, float), "bool": bool, "null": type(None), "timestamp": str}
        want = kinds.get(tag.removeprefix(_TAG))
        if want is None or not isinstance(value, want) or (want is int and isinstance(value, bool)):
            self.error(node, f"cannot read {text!r} as {tag.replace(_TAG, '!!')}")
            return None
        return float(value) if tag == _TAG + "float" else (text if tag == _TAG + "timestamp" else value)

    def mapping(self, node: MappingNode) -> dict[str, Any]:
        out: dict[str, Any] = {}
        lines: dict[str, int] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if (key_node.tag == _PLAIN and key_node.value == "<<") or key_node.tag == _TAG + "merge":
                merged = {**self.merge_sources(value_node), **merged}
                continue
            key = _key_string(self.build(key_node))
            if key is None:
                self.error(key_node, "a mapping key must be a string, number or boolean")
                continue
            line = key_node.start_mark.line + 1
            if key in lines:
                self.error(key_node, f'key "{key}" already set in this mapping at line {lines[key]}')
                continue
            lines[key] = line
            out[key] = self.build(value_node)
        return {**merged, **out}

    def merge_sources(self, node: Node) -> dict[str, Any]:
        """The mappings a merge key names; earlier ones win, as in YAML's merge-key spec."""
        sources = node.value if isinstance(node, SequenceNode) else [node]
        merged: dict[str, Any] = {}
        for source in reversed(sources):
            if not isinstance(source, MappingNode):
                self.error(source, "a merge key (<<) needs a mapping or a list of mappings")
                continue
            merged.update(self.build(source))
        return merged


def read_documents(text: str) -> list[Document]:
    """Every non-empty document in ``text``; a syntax error ends the list with a document holding it.

    Empty documents (``---`` alone, or only comments) are skipped, as kubectl skips them.
    """
    yaml = YAML(typ="safe", pure=True)
    yaml.Resolver = _PlainResolver
    docs: list[Document] = []
    number = 0
    nodes = yaml.compose_all(text)
    while True:
        number += 1
        try:
            node = next(nodes)
        except StopIteration:
            return docs
        except MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
            problem = str(exc.problem or exc.context)
            if exc.context and exc.problem and exc.context_mark:
                problem += f" ({exc.context} started at line {exc.context_mark.line + 1})"
            docs.append(Document(number, mark.line + 1 if mark else 0, errors=[f"{where}{problem}"]))
            return docs
        except (YAMLError, RecursionError) as exc:
            reason = "nesting too deep" if isinstance(exc, RecursionError) else str(exc).strip()
            docs.append(Document(number, 0, errors=[f"YAML: {reason}"]))
            return docs
        if node is None:
            continue
        builder = _Builder()
        try:
            value = builder.build(node)
        except _NotJSON as exc:
            value, builder.errors = None, [*builder.errors, str(exc)]
        except RecursionError:
            value, builder.errors = None, [*builder.errors, "nesting too deep"]
        if value is None and not builder.errors:
            continue  # a document that is only `null` or `~`: kubectl skips it as well
        docs.append(Document(number, node.start_mark.line + 1, value, builder.errors))


def reads_back_as_itself(text: str) -> bool:
    """Whether ``text`` written as a plain scalar is read back (by kubectl, and ``read_documents``) as
    the same string."""
    try:
        return resolve_plain(text) == text
    except _NotJSON:
        return False


class Dumper(pyyaml.SafeDumper):
    """PyYAML's safe dumper, quoting every string that kubectl would read as something else."""

    def represent_str(self, data: str) -> pyyaml.ScalarNode:
        style = None if data and reads_back_as_itself(data) else "'"
        return self.represent_scalar("tag:yaml.org,2002:str", data, style=style)


Dumper.add_representer(str, Dumper.represent_str)
