"""Reading RLJobs from files, folders and stdin, with every error reported in Kubernetes' field-path form.

This is the one manifest reader: ``rljob validate/render/train``, the trainer's ``--config`` and the
tests all come through ``load_manifests``. It accepts what ``kubectl apply -f`` accepts: a file, a folder
(its ``.yaml``/``.yml``/``.json`` files), ``-`` for stdin, multi-document files and ``kind: List``; YAML
is read by kubectl's rules (``kubeyaml``). Every document is checked and every problem is reported with
its file, document and field, instead of stopping at the first bad one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from rljob.api.kubeyaml import read_documents
from rljob.api.spec import API_VERSION, KIND, RLJob

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
"""What ``-f <folder>`` reads, as kubectl does (not recursive)."""


class RLJobError(ValueError):
    """RLJobs that cannot be used; ``errors`` lists every problem as ``path: message``."""

    def __init__(self, errors: list[str], source: str = "RLJob", problem: str = "is invalid") -> None:
        self.errors = errors
        super().__init__(f"{source} {problem}:\n" + "\n".join(f"  - {e}" for e in errors))

    @classmethod
    def join(cls, parts: list[RLJobError]) -> RLJobError:
        """One error for several sources, keeping each source's own heading."""
        joined = cls([e for p in parts for e in p.errors])
        joined.args = ("\n".join(str(p) for p in parts),)
        return joined


def _path(loc: tuple[Any, ...]) -> str:
    """('spec', 'grpo', 'beta') -> 'spec.grpo.beta'; list indexes as [i]; union branches dropped."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in str(part) or str(part).startswith(("function-", "literal[", "constrained-")):
            continue  # pydantic's name for a union branch or validator, not a field
        else:
            out += ("." if out else "") + str(part)
    return out


def errors_of(exc: ValidationError) -> list[str]:
    """Flatten a pydantic ValidationError into ``path: message`` lines (cross-field rules included)."""
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "value_error" and not err["loc"]:
            lines.extend(msg.splitlines())  # the cross-field rules: already one "path: message" per line
        else:
            lines.append(f"{_path(err['loc'])}: {msg}")
    return list(dict.fromkeys(lines))


def parse_rljob(obj: Any, source: str = "RLJob") -> RLJob:
    """Validate a decoded manifest; raise RLJobError listing every problem."""
    if not isinstance(obj, dict):
        raise RLJobError([f"<root>: expected a mapping, got {type(obj).__name__}"], source)
    kind = obj.get("kind")
    if isinstance(kind, str) and kind != KIND:  # e.g. a Namespace next to the RLJob in one file
        raise RLJobError(
            [f"kind: {kind} is not an {KIND} ({API_VERSION}); this command reads RLJobs"], source
        )
    try:
        return RLJob.model_validate(obj)
    except ValidationError as exc:
        raise RLJobError(errors_of(exc), source) from None


@dataclass
class Found:
    """One manifest found in the input: where it came from, and the RLJob or what is wrong with it."""

    where: str
    job: RLJob | None = None
    error: RLJobError | None = None


@dataclass
class _Text:
    name: str
    text: str | None = None
    errors: list[str] = field(default_factory=list)


def _decode(name: str, data: bytes) -> _Text:
    """Bytes -> text: UTF-8 (a BOM allowed) or UTF-16 with a BOM, as the YAML spec allows."""
    encoding = "utf-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
    try:
        return _Text(name, data.decode(encoding))
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        bad = data[exc.start : exc.start + 1].hex()
        label = "UTF-16" if encoding == "utf-16" else "UTF-8"
        return _Text(name, errors=[f"line {line}: not {label} text (byte 0x{bad}); save the file as UTF-8"])


def _texts(filenames: Iterable[str | Path], stdin: BinaryIO | None) -> list[_Text]:
    out: list[_Text] = []
    for filename in filenames:
        name = str(filename)
        if name == "-":
            out.append(_decode("<stdin>", (stdin or sys.stdin.buffer).read()))
            continue
        path = Path(name)
        try:
            if path.is_dir():
                files = sorted(p for p in path.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file())
                if not files:
                    out.append(
                        _Text(name, errors=[f"no {', '.join(MANIFEST_SUFFIXES)} files in this folder"])
                    )
                out.extend(_decode(str(p), p.read_bytes()) for p in files)
            else:
                out.append(_decode(name, path.read_bytes()))
        except OSError as exc:
            reason = "no such file or directory" if isinstance(exc, FileNotFoundError) else exc.strerror
            out.append(_Text(name, errors=[str(reason or exc).lower()]))
    return out


def _manifests(value: Any) -> list[tuple[str, Any]]:
    """A document's manifests with their labels: itself (""), or the items of a ``kind: List``, as
    kubectl flattens them ("items[0]", ...)."""
    if isinstance(value, dict) and str(value.get("kind", "")).endswith("List") and "items" in value:
        items = value["items"]
        if isinstance(items, list):
            return [(f"items[{i}]", item) for i, item in enumerate(items)]
    return [("", value)]


def load_manifests(filenames: Iterable[str | Path], stdin: BinaryIO | None = None) -> list[Found]:
    """Every RLJob manifest in ``filenames`` (files, folders, ``-``), each parsed or with its errors."""
    found: list[Found] = []
    for text in _texts(filenames, stdin):
        if text.text is None:
            found.append(Found(text.name, error=RLJobError(text.errors, text.name, "cannot be read")))
            continue
        docs = read_documents(text.text)
        if not docs:
            found.append(Found(text.name, error=RLJobError(["no YAML document found"], text.name)))
        several = len(docs) > 1 or any(doc.number > 1 for doc in docs)
        for doc in docs:
            parts = [f"document {doc.number}"] if several else []
            if doc.errors:
                label = _label(text.name, parts)
                found.append(Found(label, error=RLJobError(doc.errors, label, "is not valid YAML")))
                continue
            for item, obj in _manifests(doc.value):
                label = _label(text.name, [*parts, item] if item else parts)
                try:
                    found.append(Found(label, job=parse_rljob(obj, label)))
                except RLJobError as exc:
                    found.append(Found(label, error=exc))
    return found


def _label(name: str, parts: list[str]) -> str:
    """``file``, ``file (document 2)`` or ``file (document 2, items[0])``."""
    return f"{name} ({', '.join(parts)})" if parts else name


def load_rljobs(*filenames: str | Path, stdin: BinaryIO | None = None) -> list[RLJob]:
    """Every RLJob in the inputs; raise one RLJobError listing every problem of every document."""
    found = load_manifests(filenames, stdin)
    errors = [f.error for f in found if f.error is not None]
    if errors:
        raise RLJobError.join(errors)
    return [f.job for f in found if f.job is not None]


def load_rljob(path: str | Path, stdin: BinaryIO | None = None) -> RLJob:
    """The single RLJob in ``path`` (a file, or ``-`` for stdin)."""
    jobs = load_rljobs(path, stdin=stdin)
    if len(jobs) != 1:
        raise RLJobError([f"expected one RLJob, found {len(jobs)}"], str(path), "cannot be used")
    return jobs[0]


def to_manifest(job: RLJob) -> dict[str, Any]:
    """The RLJob as a plain manifest (wire names, unset fields left out)."""
    return job.model_dump(mode="json", exclude_none=True)
